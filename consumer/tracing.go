package consumer

import (
	"context"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

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

// tracing starts the runtime's spans: one per batch (a fetched batch of one
// partition) and one per handler call. Under a no-op TracerProvider a batch
// span's context is invalid, and then nothing more is done for its records:
// no handler span, no attribute, no allocation per record (see startBatch).
type tracing struct {
	tracer trace.Tracer
	topic  string
	group  string
	// names are built once: a span name per batch or call would allocate.
	batchName, handleName string
	common                []attribute.KeyValue
	startOpts             []trace.SpanStartOption
}

func newTracing(tp trace.TracerProvider, topic, group string) *tracing {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &tracing{
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

// batchSpan is the span of one batch; span is nil when tracing is off.
type batchSpan struct {
	t    *tracing
	span trace.Span
	sc   trace.SpanContext
}

// startBatch starts the span of a batch of partition's records and returns
// it; sc is valid only when tracing is on. The span is a root: the records'
// producers are linked (end), not parents, as a batch has many.
func (t *tracing) startBatch(partition int, batch []kafka.Message) batchSpan {
	// From an empty context: a span the caller's context carried would make
	// a no-op provider look active (a no-op span has its parent's context).
	_, span := t.tracer.Start(context.Background(), t.batchName, t.startOpts...)
	sc := span.SpanContext()
	if !sc.IsValid() {
		return batchSpan{} // tracing is off
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
	return batchSpan{t: t, span: span, sc: sc}
}

// on reports whether the batch is traced.
func (b batchSpan) on() bool { return b.span != nil }

// end links the records' producer contexts, notes the duplicates skipped
// (an event each, and messaging.batch.duplicate_count) and ends the span,
// with an error status when the batch failed (its error is redacted). items is what became of the
// batch's records (in the external protocol, those decided so far).
func (b batchSpan) end(items []*item, err error, secrets []string) {
	if b.span == nil {
		return
	}
	if b.span.IsRecording() {
		dups := 0
		for _, it := range items {
			if it.hasTrace {
				b.span.AddLink(trace.Link{SpanContext: remoteContext(it.trace)})
			}
			if it.state == stDuplicate {
				dups++
				b.span.AddEvent("duplicate skipped", trace.WithAttributes(
					semconv.MessagingKafkaOffset(int(it.msg.Offset)),
					semconv.MessagingMessageID(it.ev.ID.String())))
			}
		}
		b.span.SetAttributes(attribute.Int("messaging.batch.duplicate_count", dups))
		if err != nil {
			b.span.SetStatus(codes.Error, redact.Text(err.Error(), secrets...))
		}
	}
	b.span.End()
}

// handlerSpan starts the span of one handler call for it: its parent is the
// record's traceparent when it had one, else the batch's span. The returned
// func ends it with the call's outcome, the error text redacted of secrets. With tracing off it returns ctx and a func that does
// nothing, allocating nothing.
func (t *tracing) handlerSpan(ctx context.Context, it *item, secrets []string) (context.Context, func(error)) {
	if !it.batch.IsValid() {
		return ctx, noEnd
	}
	parent := it.batch
	if it.hasTrace {
		parent = remoteContext(it.trace)
	}
	ctx, span := t.tracer.Start(trace.ContextWithSpanContext(ctx, parent), t.handleName, t.startOpts...)
	if !span.IsRecording() {
		return ctx, func(error) { span.End() }
	}
	span.SetAttributes(t.common...)
	span.SetAttributes(
		semconv.MessagingOperationName(handleOp),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(it.msg.Partition)),
		semconv.MessagingKafkaOffset(int(it.msg.Offset)),
		semconv.MessagingMessageID(it.ev.ID.String()),
	)
	if k := it.msg.Key; len(k) > 0 && len(k) <= maxKeyAttr && utf8.Valid(k) {
		span.SetAttributes(semconv.MessagingKafkaMessageKey(string(k)))
	}
	if it.hasTrace && it.batch.IsValid() {
		// The batch is not the parent, but is where the call ran.
		span.AddLink(trace.Link{SpanContext: it.batch})
	}
	return ctx, func(err error) {
		if err != nil {
			kind := "error"
			switch {
			case IsPermanent(err):
				kind = "permanent"
			case IsUnavailable(err):
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
func remoteContext(t TraceContext) trace.SpanContext {
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

// startBatchSpan starts the span of batch, whose records decode then
// stamps with its context.
func (w *worker) startBatchSpan(batch []kafka.Message) batchSpan {
	bs := w.c.tracing.startBatch(w.partition, batch)
	w.span = bs.sc
	return bs
}

// tracedCall is call inside a handler span. A handler that swallowed a
// failed statement's error has failed (handle), and its span says so.
func (w *worker) tracedCall(ctx context.Context, tx pgx.Tx, it *item) error {
	ctx, end := w.c.tracing.handlerSpan(ctx, it, w.c.secrets)
	err := w.call(ctx, tx, &it.ev)
	if err == nil && it.batch.IsValid() {
		if pc := tx.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() == 'E' {
			end(errAbortedTx)
			return nil
		}
	}
	end(err)
	return err
}

// tracedInvoke is invoke inside a handler span.
func (p *xpart) tracedInvoke(ctx context.Context, r *xrec) error {
	ctx, end := p.c.tracing.handlerSpan(ctx, &r.item, p.c.secrets)
	err := p.invoke(ctx, &r.ev)
	end(err)
	return err
}

// traceAccept starts the span of a batch the external protocol accepts;
// the returned func ends it with the records accept added to the window.
// The handler calls run after it ended, as children of it or of their
// records' traceparents.
func (p *xpart) traceAccept(batch []kafka.Message) func() {
	bs := p.w.startBatchSpan(batch)
	if !bs.on() {
		return noAccept
	}
	from := len(p.window)
	return func() {
		recs := p.window[from:]
		items := make([]*item, len(recs))
		for i, r := range recs {
			items[i] = &r.item
		}
		bs.end(items, nil, p.c.secrets)
	}
}

func noAccept() {}

// itemPtrs points at each of items.
func itemPtrs(items []item) []*item {
	out := make([]*item, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// spanError is the error a batch span ends with: a revoked partition's batch
// did not fail.
func spanError(err error) error {
	if errors.Is(err, errAbandoned) {
		return nil
	}
	return err
}
