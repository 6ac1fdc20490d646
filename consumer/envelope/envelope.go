package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Reason says why a message was not processed normally. The runtime adds its
// own reasons (outside_window, handler_failed) to the ones the decoder gives.
type Reason string

// Reasons the decoder gives.
const (
	ReasonNotJSON          Reason = "not_json"           // JSON envelope expected, the value is not a JSON object
	ReasonMissingID        Reason = "missing_id"         // no id field / ce_id header, or it is empty or not a string
	ReasonInvalidUUID      Reason = "invalid_uuid"       // the id is not a UUID in canonical text form
	ReasonWrongUUIDVersion Reason = "wrong_uuid_version" // a UUID, but not version 7 with the RFC 9562 variant
	ReasonOversized        Reason = "oversized"          // the value is larger than Options.MaxBytes
)

// Mode selects where the envelope is read from.
type Mode string

const (
	// ModeJSON reads the id (and optionally type, time, payload) from fields
	// of a JSON object in the message value.
	ModeJSON Mode = "json"
	// ModeCloudEvents reads the CloudEvents Kafka protocol binding: binary mode
	// (ce_id, ce_type, ce_time headers; the value is the data), or structured
	// mode when the content-type header is application/cloudevents+json.
	ModeCloudEvents Mode = "cloudevents"
	// ModeAuto uses CloudEvents when a ce_id or ce_specversion header, or a
	// CloudEvents content type, is present, and JSON otherwise.
	ModeAuto Mode = "auto"
)

// Defaults for Options.
const (
	DefaultIDField   = "eventId"
	DefaultTypeField = "type"
	DefaultTimeField = "occurredAt"
	DefaultMaxBytes  = 1 << 20
)

// Options configures the decoder. The zero value decodes the JSON envelope
// with the default field names and size limit.
type Options struct {
	Mode      Mode   // default ModeJSON
	IDField   string // JSON mode: the field holding the event id; default "eventId"
	TypeField string // JSON mode: the field holding the event type; default "type"; "-" for none
	TimeField string // JSON mode: the field holding the RFC 3339 occurrence time; default "occurredAt"; "-" for none
	// PayloadField, when set, makes Payload the raw JSON of that field instead
	// of the whole message value (JSON mode).
	PayloadField string
	MaxBytes     int // values larger than this are rejected as oversized; default 1 MiB; <0 for no limit
}

// WithDefaults returns o with empty fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Mode == "" {
		o.Mode = ModeJSON
	}
	if o.IDField == "" {
		o.IDField = DefaultIDField
	}
	if o.TypeField == "" {
		o.TypeField = DefaultTypeField
	}
	if o.TimeField == "" {
		o.TimeField = DefaultTimeField
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return o
}

// Validate reports a setting that can never work.
func (o Options) Validate() error {
	o = o.WithDefaults()
	switch o.Mode {
	case ModeJSON, ModeCloudEvents, ModeAuto:
	default:
		return fmt.Errorf("mode %q: must be json, cloudevents or auto", o.Mode)
	}
	if o.IDField == "-" {
		return errors.New(`id field: "-" is not allowed, the id is required`)
	}
	return nil
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Decoded is a successfully decoded envelope.
type Decoded struct {
	ID         uuid.UUID
	Type       string
	OccurredAt time.Time // from the envelope; else the timestamp in the UUID v7
	Payload    []byte    // aliases the message value (or a part of it); don't modify
	CloudEvent bool      // decoded from the CloudEvents binding
}

// Error is a decoding failure with its reason.
type Error struct {
	Reason Reason
	Detail string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Detail }

func fail(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// Decode decodes one message. The returned error, when not nil, is an *Error.
// It never panics, whatever the input.
func Decode(value []byte, headers []Header, o Options) (Decoded, error) {
	o = o.WithDefaults()
	if o.MaxBytes > 0 && len(value) > o.MaxBytes {
		return Decoded{}, fail(ReasonOversized, "value is %d bytes, limit %d", len(value), o.MaxBytes)
	}
	mode := o.Mode
	if mode == ModeAuto {
		mode = ModeJSON
		if isCloudEvent(headers) {
			mode = ModeCloudEvents
		}
	}
	if mode == ModeCloudEvents {
		if isStructured(headers) {
			return decodeStructured(value)
		}
		return decodeBinary(value, headers)
	}
	return decodeJSON(value, o)
}

func header(headers []Header, key string) ([]byte, bool) {
	// Last one wins, as with most Kafka clients' lastHeader().
	for i := len(headers) - 1; i >= 0; i-- {
		if headers[i].Key == key {
			return headers[i].Value, true
		}
	}
	return nil, false
}

func isCloudEvent(headers []Header) bool {
	if _, ok := header(headers, "ce_id"); ok {
		return true
	}
	if _, ok := header(headers, "ce_specversion"); ok {
		return true
	}
	return isStructured(headers)
}

func isStructured(headers []Header) bool {
	ct, ok := header(headers, "content-type")
	if !ok {
		return false
	}
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(string(ct))), "application/cloudevents")
}

func decodeBinary(value []byte, headers []Header) (Decoded, error) {
	raw, ok := header(headers, "ce_id")
	if !ok || len(raw) == 0 {
		return Decoded{}, fail(ReasonMissingID, "no ce_id header")
	}
	id, err := ParseV7(string(raw))
	if err != nil {
		return Decoded{}, err
	}
	d := Decoded{ID: id, Payload: value, CloudEvent: true}
	if t, ok := header(headers, "ce_type"); ok {
		d.Type = string(t)
	}
	d.OccurredAt = uuidTime(id)
	if t, ok := header(headers, "ce_time"); ok {
		if ts, err := time.Parse(time.RFC3339Nano, string(t)); err == nil {
			d.OccurredAt = ts
		}
	}
	return d, nil
}

// decodeStructured reads a CloudEvents structured-mode JSON event.
func decodeStructured(value []byte) (Decoded, error) {
	fields, err := object(value)
	if err != nil {
		return Decoded{}, err
	}
	id, err := idFrom(fields, "id")
	if err != nil {
		return Decoded{}, err
	}
	d := Decoded{ID: id, CloudEvent: true, OccurredAt: uuidTime(id)}
	d.Type = stringField(fields, "type")
	if ts, err := time.Parse(time.RFC3339Nano, stringField(fields, "time")); err == nil {
		d.OccurredAt = ts
	}
	if raw, ok := fields["data"]; ok {
		d.Payload = raw
	} else if s := stringField(fields, "data_base64"); s != "" {
		// Keep it as the JSON string; decoding base64 is the handler's call.
		d.Payload = fields["data_base64"]
	}
	return d, nil
}

func decodeJSON(value []byte, o Options) (Decoded, error) {
	fields, err := object(value)
	if err != nil {
		return Decoded{}, err
	}
	id, err := idFrom(fields, o.IDField)
	if err != nil {
		return Decoded{}, err
	}
	d := Decoded{ID: id, Payload: value, OccurredAt: uuidTime(id)}
	if o.TypeField != "-" {
		d.Type = stringField(fields, o.TypeField)
	}
	if o.TimeField != "-" {
		if ts, err := time.Parse(time.RFC3339Nano, stringField(fields, o.TimeField)); err == nil {
			d.OccurredAt = ts
		}
	}
	if o.PayloadField != "" {
		d.Payload = fields[o.PayloadField] // nil when absent
	}
	return d, nil
}

// object parses a JSON object one level deep; nested values stay raw.
func object(value []byte) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(value)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fail(ReasonNotJSON, "value is not a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return nil, fail(ReasonNotJSON, "%v", err)
	}
	return fields, nil
}

func idFrom(fields map[string]json.RawMessage, name string) (uuid.UUID, error) {
	raw, ok := fields[name]
	if !ok {
		return uuid.Nil, fail(ReasonMissingID, "no %q field", name)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return uuid.Nil, fail(ReasonMissingID, "field %q is null", name)
		}
		return uuid.Nil, fail(ReasonInvalidUUID, "field %q is not a string", name)
	}
	if s == "" {
		return uuid.Nil, fail(ReasonMissingID, "field %q is empty", name)
	}
	return ParseV7(s)
}

func stringField(fields map[string]json.RawMessage, name string) string {
	raw, ok := fields[name]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// ParseV7 parses a UUID in its canonical 36-character form (any hex case) and
// checks that it is version 7 with the RFC 9562 variant. Other forms that
// uuid.Parse accepts (urn:uuid:, braces, 32 hex digits) are rejected, so that
// one event has exactly one textual id.
func ParseV7(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.Nil, fail(ReasonInvalidUUID, "%q is not a canonical UUID", truncate(s, 64))
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fail(ReasonInvalidUUID, "%q is not a UUID", truncate(s, 64))
	}
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		return uuid.Nil, fail(ReasonWrongUUIDVersion, "%s is version %d variant %s, want version 7 variant RFC 9562", id, id.Version(), id.Variant())
	}
	return id, nil
}

// uuidTime is the Unix-millisecond timestamp in the first 48 bits of a UUID v7.
func uuidTime(id uuid.UUID) time.Time {
	ms := int64(id[0])<<40 | int64(id[1])<<32 | int64(id[2])<<24 | int64(id[3])<<16 | int64(id[4])<<8 | int64(id[5])
	return time.UnixMilli(ms).UTC()
}

// Time returns the timestamp encoded in a UUID v7.
func Time(id uuid.UUID) time.Time { return uuidTime(id) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
