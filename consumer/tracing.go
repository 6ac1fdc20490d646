package consumer

import (
	"context"
	"errors"

	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// startBatchSpan starts the span of batch, whose records decode then
// stamps with its context.
func (w *worker) startBatchSpan(batch []kafka.Message) telemetry.BatchSpan {
	bs := w.c.tracing.StartBatch(w.partition, batch)
	w.span = bs.Context()
	return bs
}

// tracedCall is call inside a handler span. A handler that swallowed a
// failed statement's error has failed (handle), and its span says so.
func (w *worker) tracedCall(ctx context.Context, tx pgx.Tx, it *record.Item) error {
	ctx, end := w.c.tracing.HandlerSpan(ctx, it, w.c.secrets)
	err := w.call(ctx, tx, &it.Ev)
	if err == nil && it.Batch.IsValid() {
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
	ctx, end := p.c.tracing.HandlerSpan(ctx, &r.Item, p.c.secrets)
	err := p.invoke(ctx, &r.Ev)
	end(err)
	return err
}

// traceAccept starts the span of a batch the external protocol accepts;
// the returned func ends it with the records accept added to the window.
// The handler calls run after it ended, as children of it or of their
// records' traceparents.
func (p *xpart) traceAccept(batch []kafka.Message) func() {
	bs := p.w.startBatchSpan(batch)
	if !bs.On() {
		return noAccept
	}
	from := len(p.window)
	return func() {
		recs := p.window[from:]
		items := make([]*record.Item, len(recs))
		for i, r := range recs {
			items[i] = &r.Item
		}
		bs.End(items, nil, p.c.secrets)
	}
}

func noAccept() {}

// spanError is the error a batch span ends with: a revoked partition's batch
// did not fail.
func spanError(err error) error {
	if errors.Is(err, errAbandoned) {
		return nil
	}
	return err
}
