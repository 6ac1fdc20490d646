package telemetry

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/segmentio/kafka-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracedBatch is a batch of n records, every other one with a traceparent.
func tracedBatch(n int) ([]kafka.Message, []record.Item) {
	msgs := make([]kafka.Message, n)
	items := make([]record.Item, n)
	tc, _ := event.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: "events", Offset: int64(i), Key: []byte("k")}
		items[i] = record.Item{Msg: msgs[i], Decoded: true, Trace: tc, HasTrace: i%2 == 0}
		items[i].Ev.ID = uuid.Must(uuid.NewV7())
	}
	return msgs, items
}

// runTracedBatch does what a batch does with spans: one batch span, a
// handler span per record, the end.
func runTracedBatch(t *Tracing, msgs []kafka.Message, items []record.Item) {
	bs := t.StartBatch(0, msgs)
	for i := range items {
		items[i].Batch = bs.Context()
		_, end := t.HandlerSpan(context.Background(), &items[i], nil)
		end(nil)
	}
	if bs.On() {
		bs.End(record.Ptrs(items), nil, nil)
	}
}

// TestTracingOffIsFree: under the global provider with none set (the
// default) and under a no-op provider, a handler call costs no allocation
// and a batch only its no-op span's Start.
func TestTracingOffIsFree(t *testing.T) {
	for name, tp := range map[string]trace.TracerProvider{"global unset": nil, "noop": noop.NewTracerProvider()} {
		tr := NewTracing(tp, "events", "g1")
		msgs, items := tracedBatch(100)
		if bs := tr.StartBatch(0, msgs); bs.On() || bs.Context().IsValid() {
			t.Fatalf("%s: the batch span is on", name)
		}
		perCall := testing.AllocsPerRun(1000, func() {
			_, end := tr.HandlerSpan(context.Background(), &items[0], nil)
			end(nil)
		})
		perBatch := testing.AllocsPerRun(1000, func() { runTracedBatch(tr, msgs, items) })
		t.Logf("%s: allocations per handler call %v, per batch of 100 %v", name, perCall, perBatch)
		if perCall != 0 {
			t.Errorf("%s: a handler call allocates %v times with tracing off, want 0", name, perCall)
		}
		// The batch span's Start: the no-op tracer boxes its span and wraps
		// the context (the global one a little more); none per record.
		if perBatch > 3 {
			t.Errorf("%s: a batch of 100 allocates %v times with tracing off, want at most 3", name, perBatch)
		}
	}
}

// BenchmarkTracing is the cost of a batch of 100 records' spans, with
// tracing off (the default) and on (an SDK provider recording every span in
// memory).
func BenchmarkTracing(b *testing.B) {
	sr := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"off", nil}, {"on", sdk}} {
		b.Run(fmt.Sprint(c.name), func(b *testing.B) {
			tr := NewTracing(c.tp, "events", "g1")
			msgs, items := tracedBatch(100)
			b.ReportAllocs()
			for b.Loop() {
				runTracedBatch(tr, msgs, items)
				if c.tp != nil {
					sr.Reset()
				}
			}
		})
	}
}
