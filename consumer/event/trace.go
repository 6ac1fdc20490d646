package event

import (
	"context"
	"encoding/hex"
	"strings"
)

// TraceContext is a W3C Trace Context (https://www.w3.org/TR/trace-context/)
// taken from an event's traceparent and tracestate headers. The runtime hands
// it to the handler, which can forward it downstream or start a span with any
// tracing library; with the consumer's Config.TracerProvider set, the runtime's own handler
// span already has it as parent.
type TraceContext struct {
	Version  byte
	TraceID  [16]byte
	ParentID [8]byte
	Flags    byte
	State    string // tracestate, verbatim
}

// Sampled reports the sampled flag.
func (t TraceContext) Sampled() bool { return t.Flags&1 == 1 }

// Traceparent renders the traceparent header value.
func (t TraceContext) Traceparent() string {
	var b strings.Builder
	b.Grow(55)
	b.WriteString(hex.EncodeToString([]byte{t.Version}))
	b.WriteByte('-')
	b.WriteString(hex.EncodeToString(t.TraceID[:]))
	b.WriteByte('-')
	b.WriteString(hex.EncodeToString(t.ParentID[:]))
	b.WriteByte('-')
	b.WriteString(hex.EncodeToString([]byte{t.Flags}))
	return b.String()
}

// ParseTraceparent parses a traceparent header value. It follows the
// specification's rules: lower-case hex, version ff invalid, all-zero trace
// and parent ids invalid, and for a version above 00 extra fields after the
// flags are allowed.
func ParseTraceparent(s string) (TraceContext, bool) {
	var t TraceContext
	if len(s) < 55 {
		return t, false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return t, false
	}
	if !lowerHex(s[:2]) || !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) {
		return t, false
	}
	v, _ := hex.DecodeString(s[:2])
	t.Version = v[0]
	if t.Version == 0xff {
		return t, false
	}
	if len(s) > 55 && (t.Version == 0 || s[55] != '-') {
		return t, false
	}
	_, _ = hex.Decode(t.TraceID[:], []byte(s[3:35]))
	_, _ = hex.Decode(t.ParentID[:], []byte(s[36:52]))
	f, _ := hex.DecodeString(s[53:55])
	t.Flags = f[0]
	if t.TraceID == ([16]byte{}) || t.ParentID == ([8]byte{}) {
		return t, false
	}
	return t, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

type traceKey struct{}

// ContextWithTrace returns ctx carrying t.
func ContextWithTrace(ctx context.Context, t TraceContext) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// TraceFromContext returns the trace context of the event being handled, if
// its record had a valid traceparent header.
func TraceFromContext(ctx context.Context) (TraceContext, bool) {
	t, ok := ctx.Value(traceKey{}).(TraceContext)
	return t, ok
}

// TraceFromHeaders reads traceparent (and tracestate) from record headers.
func TraceFromHeaders(headers []Header) (TraceContext, bool) {
	var tp, ts []byte
	var okp bool
	for _, h := range headers {
		switch strings.ToLower(h.Key) {
		case "traceparent":
			tp, okp = h.Value, true
		case "tracestate":
			ts = h.Value
		}
	}
	if !okp {
		return TraceContext{}, false
	}
	t, ok := ParseTraceparent(string(tp))
	if !ok {
		return TraceContext{}, false
	}
	t.State = string(ts)
	return t, true
}
