package consumer

import (
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// IdempotencyKeyHeader is the header IdempotencyKeyTransport sets.
const IdempotencyKeyHeader = "Idempotency-Key"

// IdempotencyKeyTransport is an http.RoundTripper that sets
// "Idempotency-Key: <event id>" on every request whose context carries an
// event, as the handler's context does, and traceparent and tracestate: those
// of the context's OpenTelemetry span (the handler's span when tracing is on,
// or a span the handler started), else the event's own. A retry after a lost response then carries the same
// key, so a provider that honours the header applies the effect once.
//
//	client := &http.Client{Transport: &consumer.IdempotencyKeyTransport{}}
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, body) // ctx from the Handler
type IdempotencyKeyTransport struct {
	// Base is the transport that sends the request; default http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper. A key already set by the caller is
// kept.
func (t *IdempotencyKeyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ev, ok := EventFromContext(req.Context())
	sc := trace.SpanContextFromContext(req.Context())
	tc, hasTrace := TraceFromContext(req.Context())
	needKey := ok && req.Header.Get(IdempotencyKeyHeader) == ""
	needTrace := (sc.IsValid() || hasTrace) && req.Header.Get("traceparent") == ""
	if !needKey && !needTrace {
		return base.RoundTrip(req)
	}
	// A RoundTripper must not modify the caller's request.
	r := req.Clone(req.Context())
	if needKey {
		r.Header.Set(IdempotencyKeyHeader, ev.ID.String())
	}
	switch {
	case needTrace && sc.IsValid():
		propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	case needTrace:
		r.Header.Set("traceparent", tc.Traceparent())
		if tc.State != "" {
			r.Header.Set("tracestate", tc.State)
		}
	}
	return base.RoundTrip(r)
}
