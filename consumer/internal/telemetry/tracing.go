package telemetry

import (
	"context"
	"strconv"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/version"
)

// TracerName is the instrumentation scope of the runtime's spans.
const TracerName = "github.com/idempotency-dev/operator/consumer"

// Span names are "<operation> <topic>", as the OpenTelemetry messaging
// conventions name spans; batchOp is a batch's, handleOp one handler call's.
const (
	batchOp  = "process"
	handleOp = "handle"
)

// maxKeyAttr bounds the record key copied into messaging.kafka.message.key.
const maxKeyAttr = 256

// Tracing starts the runtime's spans: one per batch (a fetched batch of one
// partition) and one per handler call. Under a no-op TracerProvider a batch
// span's context is invalid, and then nothing more is done for its records:
// no handler span, no attribute, no allocation per record (see startBatch).
type Tracing struct {
	tracer trace.Tracer
	topic  string
	group  string
	// names are built once: a span name per batch or call would allocate.
	batchName, handleName string
	common                []attribute.KeyValue
	startOpts             []trace.SpanStartOption
}

// NewTracing returns the tracing of one topic and group; tp nil is the
// global provider.
func NewTracing(tp trace.TracerProvider, topic, group string) *Tracing {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracing{
		tracer:     tp.Tracer(TracerName, trace.WithInstrumentationVersion(version.Get().Version)),
		topic:      topic,
		group:      group,
		batchName:  batchOp + " " + topic,
		handleName: handleOp + " " + topic,
		startOpts:  []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)},
		common: []attribute.KeyValue{
			semconv.MessagingSystemKafka,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(topic),
			semconv.MessagingConsumerGroupName(group),
		},
	}
}

// BatchSpan is the span of one batch; span is nil when tracing is off.
type BatchSpan struct {
	t    *Tracing
	span trace.Span
	sc   trace.SpanContext
}

// StartBatch starts the span of a batch of partition's records and returns
// it; sc is valid only when tracing is on. The span is a root: the records'
// producers are linked (end), not parents, as a batch has many.
func (t *Tracing) StartBatch(partition int, batch []kafka.Message) BatchSpan {
	// From an empty context: a span the caller's context carried would make
	// a no-op provider look active (a no-op span has its parent's context).
	_, span := t.tracer.Start(context.Background(), t.batchName, t.startOpts...)
	sc := span.SpanContext()
	if !sc.IsValid() {
		return BatchSpan{} // tracing is off
	}
	if span.IsRecording() {
		span.SetAttributes(t.common...)
		span.SetAttributes(
			semconv.MessagingOperationName(batchOp),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(partition)),
			semconv.MessagingBatchMessageCount(len(batch)),
		)
		if len(batch) > 0 {
			span.SetAttributes(
				attribute.Int64("messaging.kafka.offset.first", batch[0].Offset),
				attribute.Int64("messaging.kafka.offset.last", batch[len(batch)-1].Offset))
		}
	}
	return BatchSpan{t: t, span: span, sc: sc}
}

// On reports whether the batch is traced.
func (b BatchSpan) On() bool { return b.span != nil }

// Context is the batch span's context, which decoding stamps each record
// with; invalid when tracing is off.
func (b BatchSpan) Context() trace.SpanContext { return b.sc }

// End links the records' producer contexts, notes the duplicates skipped
// (an event each, and messaging.Batch.duplicate_count) and ends the span,
// with an error status when the batch failed (its error is redacted). items is what became of the
// batch's records (in the external protocol, those decided so far).
func (b BatchSpan) End(items []*record.Item, err error, secrets []string) {
	if b.span == nil {
		return
	}
	if b.span.IsRecording() {
		dups := 0
		for _, it := range items {
			if it.HasTrace {
				b.span.AddLink(trace.Link{SpanContext: remoteContext(it.Trace)})
			}
			if it.State == record.Duplicate {
				dups++
				b.span.AddEvent("duplicate skipped", trace.WithAttributes(
					semconv.MessagingKafkaOffset(int(it.Msg.Offset)),
					semconv.MessagingMessageID(it.Ev.ID.String())))
			}
		}
		b.span.SetAttributes(attribute.Int("messaging.Batch.duplicate_count", dups))
		if err != nil {
			b.span.SetStatus(codes.Error, redact.Text(err.Error(), secrets...))
		}
	}
	b.span.End()
}

// HandlerSpan starts the span of one handler call for it: its parent is the
// record's traceparent when it had one, else the batch's span. The returned
// func ends it with the call's outcome, the error text redacted of secrets. With tracing off it returns ctx and a func that does
// nothing, allocating nothing.
func (t *Tracing) HandlerSpan(ctx context.Context, it *record.Item, secrets []string) (context.Context, func(error)) {
	if !it.Batch.IsValid() {
		return ctx, noEnd
	}
	parent := it.Batch
	if it.HasTrace {
		parent = remoteContext(it.Trace)
	}
	ctx, span := t.tracer.Start(trace.ContextWithSpanContext(ctx, parent), t.handleName, t.startOpts...)
	if !span.IsRecording() {
		return ctx, func(error) { span.End() }
	}
	span.SetAttributes(t.common...)
	span.SetAttributes(
		semconv.MessagingOperationName(handleOp),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(it.Msg.Partition)),
		semconv.MessagingKafkaOffset(int(it.Msg.Offset)),
		semconv.MessagingMessageID(it.Ev.ID.String()),
	)
	if k := it.Msg.Key; len(k) > 0 && len(k) <= maxKeyAttr && utf8.Valid(k) {
		span.SetAttributes(semconv.MessagingKafkaMessageKey(string(k)))
	}
	if it.HasTrace && it.Batch.IsValid() {
		// The batch is not the parent, but is where the call ran.
		span.AddLink(trace.Link{SpanContext: it.Batch})
	}
	return ctx, func(err error) {
		if err != nil {
			kind := "error"
			switch {
			case event.IsPermanent(err):
				kind = "permanent"
			case event.IsUnavailable(err):
				kind = "unavailable"
			}
			span.SetAttributes(semconv.ErrorTypeKey.String(kind))
			span.SetStatus(codes.Error, redact.Text(err.Error(), secrets...))
		}
		span.End()
	}
}

func noEnd(error) {}

// remoteContext is the OpenTelemetry form of a record's trace context.
func remoteContext(t event.TraceContext) trace.SpanContext {
	cfg := trace.SpanContextConfig{
		TraceID:    trace.TraceID(t.TraceID),
		SpanID:     trace.SpanID(t.ParentID),
		TraceFlags: trace.TraceFlags(t.Flags),
		Remote:     true,
	}
	if t.State != "" {
		if ts, err := trace.ParseTraceState(t.State); err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg)
}
