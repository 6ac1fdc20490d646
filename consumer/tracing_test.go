package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// The producer's span context every traced record of these tests carries.
const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
	producerTP    = "00-" + producerTrace + "-" + producerSpan + "-01"
)

// newTracer returns a provider whose ended spans sr records, sampling all.
func newTracer(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

func attrOf(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// spansNamed returns the ended spans named name, by messaging.message.id
// for handler spans.
func spansNamed(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func handlerSpansOf(sr *tracetest.SpanRecorder, topic string, id uuid.UUID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spansNamed(sr, "handle "+topic) {
		if v, ok := attrOf(s, "messaging.message.id"); ok && v.AsString() == id.String() {
			out = append(out, s)
		}
	}
	return out
}

func batchSpanByID(sr *tracetest.SpanRecorder, topic string, id trace.SpanID) sdktrace.ReadOnlySpan {
	for _, s := range spansNamed(sr, "process "+topic) {
		if s.SpanContext().SpanID() == id {
			return s
		}
	}
	return nil
}

// checkAttrs reports the attributes of s that differ from want.
func checkAttrs(t *testing.T, what string, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := attrOf(s, k)
		if !ok {
			t.Errorf("%s: attribute %s missing", what, k)
		} else if got.String() != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got.String(), v)
		}
	}
}

// TestTracingTransactional: a record with a traceparent yields a batch span
// and a handler span whose parent is the record's producer span; a record
// without one gets the batch span as parent; a duplicate shows as an event
// on its batch span; a failing handler's spans have an error status, and so
// do those of a handler that swallowed a failed statement's error.
func TestTracingTransactional(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	tp, sr := newTracer(t)
	traced, plain, failing, swallowing := newID(t), newID(t), newID(t), newID(t)
	e.failIDs.Store(failing, consumer.Permanent(errors.New("bad amount")))
	handler := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		if ev.ID == swallowing {
			_, _ = tx.Exec(ctx, "SELECT 1/0")
			return nil
		}
		return e.handler(ctx, tx, ev)
	}
	m := event(traced, 0, "")
	m.Key = []byte("customer-7")
	m.Headers = []kafka.Header{{Key: "traceparent", Value: []byte(producerTP)}}
	e.kafka.Produce(t, e.topic, m, event(plain, 0, ""), event(failing, 0, ""), event(swallowing, 0, ""))
	// One attempt: a retry would run the handlers before the swallowing
	// record once more (retries start a new transaction), and this test
	// counts each record's handler spans.
	r := e.start(e.config(func(c *consumer.Config) {
		c.TracerProvider = tp
		c.DeadLetterTopic = e.dlq
		c.HandlerMaxAttempts = 1
	}), handler)
	e.waitCaughtUp(t, 30*time.Second)
	// The duplicate comes in a later batch, after the first committed.
	e.kafka.Produce(t, e.topic, m)
	e.waitCaughtUp(t, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	hs := handlerSpansOf(sr, e.topic, traced)
	if len(hs) != 1 {
		t.Fatalf("handler spans of the traced record: %d, want 1 (the duplicate runs no handler)", len(hs))
	}
	h := hs[0]
	if got := h.Parent(); got.TraceID().String() != producerTrace || got.SpanID().String() != producerSpan || !got.IsRemote() {
		t.Errorf("handler span parent = %s/%s remote=%v, want the record's traceparent %s", got.TraceID(), got.SpanID(), got.IsRemote(), producerTP)
	}
	if h.SpanKind() != trace.SpanKindConsumer || h.Status().Code == codes.Error {
		t.Errorf("handler span kind %v status %v", h.SpanKind(), h.Status())
	}
	checkAttrs(t, "handler span", h, map[string]string{
		"messaging.system":                   "kafka",
		"messaging.operation.type":           "process",
		"messaging.destination.name":         e.topic,
		"messaging.destination.partition.id": "0",
		"messaging.consumer.group.name":      e.group,
		"messaging.kafka.offset":             "0",
		"messaging.message.id":               traced.String(),
		"messaging.kafka.message.key":        "customer-7",
	})
	if len(h.Links()) != 1 {
		t.Fatalf("handler span links = %d, want 1 (its batch)", len(h.Links()))
	}
	batch := batchSpanByID(sr, e.topic, h.Links()[0].SpanContext.SpanID())
	if batch == nil {
		t.Fatal("the handler span's link is not a batch span")
	}
	checkAttrs(t, "batch span", batch, map[string]string{
		"messaging.system":                   "kafka",
		"messaging.operation.type":           "process",
		"messaging.destination.name":         e.topic,
		"messaging.destination.partition.id": "0",
		"messaging.consumer.group.name":      e.group,
	})
	if n, ok := attrOf(batch, "messaging.batch.message_count"); !ok || n.AsInt64() < 1 {
		t.Errorf("batch span message_count = %v", n.AsInt64())
	}
	linked := false
	for _, l := range batch.Links() {
		linked = linked || l.SpanContext.TraceID().String() == producerTrace && l.SpanContext.SpanID().String() == producerSpan
	}
	if !linked {
		t.Errorf("batch span does not link the record's producer context: %v", batch.Links())
	}

	ps := handlerSpansOf(sr, e.topic, plain)
	if len(ps) != 1 || batchSpanByID(sr, e.topic, ps[0].Parent().SpanID()) == nil {
		t.Errorf("the record without traceparent: %d handler spans, want 1 whose parent is a batch span", len(ps))
	}

	fs := handlerSpansOf(sr, e.topic, failing)
	if len(fs) != 1 || fs[0].Status().Code != codes.Error || !strings.Contains(fs[0].Status().Description, "bad amount") {
		t.Errorf("failing handler: %d spans, want 1 with status error \"bad amount\"", len(fs))
	} else if v, _ := attrOf(fs[0], "error.type"); v.AsString() != "permanent" {
		t.Errorf("failing handler span error.type = %q, want permanent", v.String())
	}

	ss := handlerSpansOf(sr, e.topic, swallowing)
	if len(ss) == 0 {
		t.Error("no handler span for the handler that swallowed a statement's error")
	}
	for _, s := range ss {
		if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "aborted") {
			t.Errorf("swallowed statement error: span status %v %q, want Error \"...aborted\"", s.Status().Code, s.Status().Description)
		}
	}

	dupEvent := false
	for _, b := range spansNamed(sr, "process "+e.topic) {
		for _, ev := range b.Events() {
			if ev.Name != "duplicate skipped" {
				continue
			}
			for _, kv := range ev.Attributes {
				dupEvent = dupEvent || kv.Key == "messaging.message.id" && kv.Value.AsString() == traced.String()
			}
		}
	}
	if !dupEvent {
		t.Error(`no batch span has a "duplicate skipped" event for the redelivered record`)
	}
}

// traceServer is an HTTP endpoint that keeps the traceparent header of
// each request by Idempotency-Key.
type traceServer struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string]string
}

func newTraceServer(t testing.TB) *traceServer {
	s := &traceServer{got: map[string]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.got[r.Header.Get("Idempotency-Key")] = r.Header.Get("traceparent")
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *traceServer) traceparent(id uuid.UUID) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.got[id.String()]
	return v, ok
}

// TestTracingHTTPSink: under the external protocol, the HTTP sink's request
// carries the handler span's context, whose parent is the record's
// traceparent (or the batch span, for a record without one).
func TestTracingHTTPSink(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	tp, sr := newTracer(t)
	srv := newTraceServer(t)
	post, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	traced, plain := newID(t), newID(t)
	m := event(traced, 0, "")
	m.Headers = []kafka.Header{{Key: "traceparent", Value: []byte(producerTP)}}
	e.kafka.Produce(t, e.topic, m, event(plain, 0, ""))
	r := e.startExternal(e.config(func(c *consumer.Config) { c.TracerProvider = tp }), post)
	e.waitCaughtUp(t, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	for _, id := range []uuid.UUID{traced, plain} {
		hs := handlerSpansOf(sr, e.topic, id)
		if len(hs) != 1 {
			t.Fatalf("event %s: %d handler spans, want 1", id, len(hs))
		}
		sc := hs[0].SpanContext()
		want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
		if got, _ := srv.traceparent(id); got != want {
			t.Errorf("event %s: request traceparent %q, want the handler span's %q", id, got, want)
		}
		parent := hs[0].Parent()
		if id == traced && (parent.TraceID().String() != producerTrace || parent.SpanID().String() != producerSpan) {
			t.Errorf("traced event's handler span parent %s/%s, want %s", parent.TraceID(), parent.SpanID(), producerTP)
		}
		if id == plain && batchSpanByID(sr, e.topic, parent.SpanID()) == nil {
			t.Errorf("plain event's handler span parent %s is not a batch span", parent.SpanID())
		}
	}
}

// TestTracingOffPassesTraceparent: with no TracerProvider (and no global
// one set) the HTTP sink forwards the record's own traceparent, as before
// tracing existed, and a record without one gets none.
func TestTracingOffPassesTraceparent(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	srv := newTraceServer(t)
	post, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	traced, plain := newID(t), newID(t)
	m := event(traced, 0, "")
	m.Headers = []kafka.Header{{Key: "traceparent", Value: []byte(producerTP)}}
	e.kafka.Produce(t, e.topic, m, event(plain, 0, ""))
	r := e.startExternal(e.config(), post)
	e.waitCaughtUp(t, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got, ok := srv.traceparent(traced); !ok || got != producerTP {
		t.Errorf("traced record: request traceparent %q (sent %v), want the record's %q", got, ok, producerTP)
	}
	if got, ok := srv.traceparent(plain); !ok || got != "" {
		t.Errorf("plain record: request traceparent %q (sent %v), want none", got, ok)
	}
}
