package envelope

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

const v7 = "01890a5d-ac96-774b-bcce-b302099a8057"

func reasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func TestDecode(t *testing.T) {
	v4 := uuid.New().String()
	big := `{"eventId":"` + v7 + `","pad":"` + strings.Repeat("x", 2000) + `"}`
	tests := []struct {
		name    string
		value   string
		headers []Header
		opts    Options
		reason  Reason // "" = success
		typ     string
		payload string
	}{
		{name: "json ok", value: `{"eventId":"` + v7 + `","type":"payment.made","amount":5}`, typ: "payment.made"},
		{name: "json uppercase hex", value: `{"eventId":"` + strings.ToUpper(v7) + `"}`},
		{name: "json leading space", value: "  \n{\"eventId\":\"" + v7 + "\"}"},
		{name: "not json", value: `hello`, reason: ReasonNotJSON},
		{name: "json array", value: `[1,2]`, reason: ReasonNotJSON},
		{name: "truncated json", value: `{"eventId":"` + v7, reason: ReasonNotJSON},
		{name: "empty value", value: ``, reason: ReasonNotJSON},
		{name: "no id", value: `{"id":"` + v7 + `"}`, reason: ReasonMissingID},
		{name: "null id", value: `{"eventId":null}`, reason: ReasonMissingID},
		{name: "empty id", value: `{"eventId":""}`, reason: ReasonMissingID},
		{name: "numeric id", value: `{"eventId":42}`, reason: ReasonInvalidUUID},
		{name: "garbage id", value: `{"eventId":"not-a-uuid"}`, reason: ReasonInvalidUUID},
		{name: "urn form", value: `{"eventId":"urn:uuid:` + v7 + `"}`, reason: ReasonInvalidUUID},
		{name: "braces form", value: `{"eventId":"{` + v7 + `}"}`, reason: ReasonInvalidUUID},
		{name: "v4", value: `{"eventId":"` + v4 + `"}`, reason: ReasonWrongUUIDVersion},
		{name: "v7 bad variant", value: `{"eventId":"01890a5d-ac96-774b-0cce-b302099a8057"}`, reason: ReasonWrongUUIDVersion},
		{name: "nil uuid", value: `{"eventId":"00000000-0000-0000-0000-000000000000"}`, reason: ReasonWrongUUIDVersion},
		{name: "oversized", value: big, opts: Options{MaxBytes: 1000}, reason: ReasonOversized},
		{name: "no limit", value: big, opts: Options{MaxBytes: -1}},
		{name: "custom id field", value: `{"id":"` + v7 + `"}`, opts: Options{IDField: "id"}},
		{name: "payload field", value: `{"eventId":"` + v7 + `","data":{"a":1}}`, opts: Options{PayloadField: "data"}, payload: `{"a":1}`},
		{name: "ce binary", value: `opaque bytes`, opts: Options{Mode: ModeCloudEvents},
			headers: []Header{{"ce_id", []byte(v7)}, {"ce_type", []byte("t1")}, {"ce_specversion", []byte("1.0")}}, typ: "t1", payload: "opaque bytes"},
		{name: "ce binary missing id", value: `{}`, opts: Options{Mode: ModeCloudEvents}, reason: ReasonMissingID},
		{name: "ce binary v4", value: `{}`, opts: Options{Mode: ModeCloudEvents}, headers: []Header{{"ce_id", []byte(v4)}}, reason: ReasonWrongUUIDVersion},
		{name: "ce structured", opts: Options{Mode: ModeCloudEvents},
			value:   `{"specversion":"1.0","id":"` + v7 + `","type":"t2","data":{"x":true}}`,
			headers: []Header{{"content-type", []byte("application/cloudevents+json; charset=utf-8")}}, typ: "t2", payload: `{"x":true}`},
		{name: "auto picks ce", value: `not json at all`, opts: Options{Mode: ModeAuto}, headers: []Header{{"ce_id", []byte(v7)}}},
		{name: "auto picks json", value: `{"eventId":"` + v7 + `"}`, opts: Options{Mode: ModeAuto}},
		{name: "json mode ignores ce headers", value: `nope`, headers: []Header{{"ce_id", []byte(v7)}}, reason: ReasonNotJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decode([]byte(tt.value), tt.headers, tt.opts)
			if got := reasonOf(err); got != tt.reason {
				t.Fatalf("reason = %q (err %v), want %q", got, err, tt.reason)
			}
			if err != nil && reasonOf(err) == "" {
				t.Fatalf("error without reason: %v", err)
			}
			if tt.reason != "" {
				return
			}
			if d.ID.String() != v7 {
				t.Errorf("id = %s, want %s", d.ID, v7)
			}
			if d.Type != tt.typ {
				t.Errorf("type = %q, want %q", d.Type, tt.typ)
			}
			want := tt.payload
			if want == "" {
				want = tt.value
			}
			if string(d.Payload) != want {
				t.Errorf("payload = %q, want %q", d.Payload, want)
			}
			if d.OccurredAt.IsZero() {
				t.Error("occurredAt is zero")
			}
		})
	}
}

func TestOccurredAt(t *testing.T) {
	d, err := Decode([]byte(`{"eventId":"`+v7+`","occurredAt":"2024-05-01T10:00:00.5Z"}`), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2024, 5, 1, 10, 0, 0, 5e8, time.UTC); !d.OccurredAt.Equal(want) {
		t.Errorf("occurredAt = %v, want %v", d.OccurredAt, want)
	}
	// Without the field: the UUID's own timestamp.
	id, _ := uuid.NewV7()
	d, err = Decode([]byte(`{"eventId":"`+id.String()+`"}`), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(d.OccurredAt) > time.Minute || time.Since(d.OccurredAt) < -time.Minute {
		t.Errorf("occurredAt from uuid = %v, want about now", d.OccurredAt)
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Options{Mode: "xml"}).Validate(); err == nil {
		t.Fatal("mode xml accepted")
	}
	if err := (Options{IDField: "-"}).Validate(); err == nil {
		t.Fatal(`id field "-" accepted`)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"eventId":"`+v7+`"}`), "", "", uint8(0))
	f.Add([]byte(`{"eventId":"`+v7+`","type":"x","occurredAt":"2024-01-01T00:00:00Z"}`), "", "", uint8(0))
	f.Add([]byte(`opaque`), "ce_id", v7, uint8(1))
	f.Add([]byte(`{"id":"`+v7+`","data":1}`), "content-type", "application/cloudevents+json", uint8(2))
	f.Add([]byte(`{"eventId":42}`), "", "", uint8(0))
	f.Add([]byte(`[`), "", "", uint8(2))
	modes := []Mode{ModeJSON, ModeCloudEvents, ModeAuto}
	f.Fuzz(func(t *testing.T, value []byte, hk, hv string, mode uint8) {
		var headers []Header
		if hk != "" {
			headers = []Header{{Key: hk, Value: []byte(hv)}}
		}
		o := Options{Mode: modes[int(mode)%len(modes)], MaxBytes: 4096}
		d, err := Decode(value, headers, o)
		if err != nil {
			if reasonOf(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			if d.ID != uuid.Nil {
				t.Fatalf("failed decode returned id %s", d.ID)
			}
			return
		}
		if d.ID.Version() != 7 || d.ID.Variant() != uuid.RFC4122 {
			t.Fatalf("accepted non-v7 id %s", d.ID)
		}
		if len(value) > 4096 {
			t.Fatalf("accepted %d bytes over the limit", len(value))
		}
	})
}
