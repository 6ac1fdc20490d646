package txpipe

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/jackc/pgx/v5"
)

// handle runs the handler for one event under a savepoint, with retries.
// sps says which savepoint an earlier event of this transaction left
// established (it is released when this event's savepoint is opened,
// keeping the subtransaction nesting flat).
//
// After every call it reads the transaction's state from the connection,
// so that the event's effect commits with its dedup row, or neither does,
// whatever the handler did: a handler that returned nil over a failed
// statement (the transaction is aborted) has failed; a statement that
// aborted the transaction before the event's savepoint existed redoes it
// in safe mode; a lost connection is the database's failure. A handler
// that ended the transaction, or left a query result open on its
// connection, is poisoned and the transaction redone without it.
//
// A failed attempt that is to be retried after a pause ends the
// transaction (a *retryError): the pause is taken with no transaction open,
// and the attempt count lives in the item, so it carries over to the next
// transaction. Only a zero pause (HandlerBackoff 0) retries in place.
func (w *batcher) handle(ctx context.Context, tx pgx.Tx, it *record.Item, sps *txSavepoints) error {
	c := w.c
	if it.Poison != "" {
		it.Attempts, it.ErrText = 1, it.Poison
		return w.handlerFailed(ctx, tx, it)
	}
	et := newEventTx(tx, sps)
	defer func() { et.done = true }()

	hctx := event.ContextWithEvent(ctx, &it.Ev)
	if it.HasTrace {
		hctx = event.ContextWithTrace(hctx, it.Trace)
	}
	pc := tx.Conn().PgConn()
	for {
		attempt := it.Attempts + 1
		err := w.tracedCall(hctx, et, it)
		if ctx.Err() != nil {
			return partition.ErrAbandoned
		}
		if et.opened {
			sps.owner = it
		}
		if gone := errors.Join(et.failed, et.redo); gone != nil && savepointGone(gone) && sps.owner != nil {
			// The previous savepoint vanished: the handler that ran with
			// it ended the transaction and carried on in a new one (COMMIT
			// AND CHAIN), or released it. Its COMMIT may have committed the
			// dedup rows of this event and the later ones without their
			// effects: redo the transaction without that handler, taking
			// those rows for the events' own (markOwnRows).
			return w.txEnded(sps.owner, fmt.Errorf("%w (the runtime's savepoint was gone after it returned)", errTxEnded), nil)
		}
		if et.failed != nil {
			return &record.InfraError{Err: fmt.Errorf("opening the event's savepoint: %w", et.failed)}
		}
		if et.redo != nil {
			return &redoError{err: fmt.Errorf("the handler's statement broke the transaction before the event's savepoint was established: %w", et.redo)}
		}
		if pc.IsClosed() {
			if err == nil {
				err = errConnLost
			}
			return &record.InfraError{Err: fmt.Errorf("handler: %w", err)}
		}
		var ended error
		if pc.IsBusy() {
			// A result the handler left open holds the connection: no
			// statement, not even the rollback, can run on it any more.
			// Closing it ends the transaction on the server.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = pc.Close(cctx)
			cancel()
			ended = errResultOpen
		} else if pc.TxStatus() == 'I' {
			// Whatever was committed stays, the rest is gone.
			ended = errTxEnded
		}
		if ended != nil {
			// Redo the transaction without calling this handler again.
			return w.txEnded(it, ended, err)
		}
		if pc.TxStatus() == 'E' {
			// A statement failed: if the handler swallowed the error, it
			// failed all the same.
			if err == nil {
				err = errAbortedTx
			}
			if !et.opened {
				// Nothing of this event can be rolled back alone.
				return &redoError{err: fmt.Errorf("the transaction is aborted and the event's savepoint was never established: %w", err)}
			}
		}
		if err == nil {
			it.State = record.Handled
			return nil
		}
		c.Metrics.HandlerErrors.WithLabelValues(c.Topic).Inc()
		if handlerInfra(err) {
			return &record.InfraError{Err: fmt.Errorf("handler: %w", err)}
		}
		if et.opened {
			if _, rbErr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+et.savepoint()); rbErr != nil {
				if savepointGone(rbErr) {
					// This handler ended the transaction and went on in a
					// new one, or released the savepoint (see above).
					return w.txEnded(it, fmt.Errorf("%w (the runtime's savepoint was gone after it returned)", errTxEnded), err)
				}
				// The connection or transaction is gone: not the event's fault.
				return &record.InfraError{Err: fmt.Errorf("handler failed and rolling back to its savepoint failed: %w", errors.Join(err, rbErr))}
			}
		}
		it.Attempts = attempt
		it.ErrText = redact.Text(err.Error(), c.Secrets...)
		if event.IsPermanent(err) || attempt >= c.HandlerMaxAttempts {
			return w.handlerFailed(ctx, tx, it)
		}
		d := backoff.At(c.HandlerBackoff, c.HandlerBackoffMax, attempt)
		w.Log.Debug("handler failed; retrying", "offset", it.Ev.Offset, "eventId", it.Ev.ID, "attempt", attempt, "pause", d, "err", it.ErrText)
		if d > 0 {
			// Never wait with the transaction open: the server may end
			// an idle one (idle_in_transaction_session_timeout), and it
			// holds its locks and a connection meanwhile.
			return &retryError{it: it, wait: d}
		}
	}
}

// txEnded is the redo of a transaction that the handler of it ended
// (ended wraps errTxEnded) or left unusable: it is not called again and
// takes the handler_failed policy, with its own error err, if any, in the
// text.
func (w *batcher) txEnded(it *record.Item, ended, err error) error {
	c := w.c
	c.Metrics.HandlerErrors.WithLabelValues(c.Topic).Inc()
	text := ended.Error()
	if err != nil {
		text += ": " + err.Error()
	}
	return &redoError{err: ended, poison: it, poisonText: redact.Text(text, c.Secrets...)}
}

// call runs the handler, turning a panic into an error.
func (w *batcher) call(ctx context.Context, tx pgx.Tx, ev *event.Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.Log.Error("handler panicked", "offset", ev.Offset, "eventId", ev.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	defer w.c.Calls.Start(ev)()
	return w.c.Handler(ctx, tx, ev)
}

// handlerFailed applies the handler_failed policy to an event whose attempts
// are used up.
func (w *batcher) handlerFailed(ctx context.Context, tx pgx.Tx, it *record.Item) error {
	it.Reason = event.ReasonHandlerFailed
	it.Policy = w.c.Policies[event.ReasonHandlerFailed]
	if it.Policy == event.PolicyStop {
		return it.StopError()
	}
	if it.Ev.Deduplicated && !w.c.DisableDedup {
		// Take the id back out of the dedup table, in this transaction: the
		// event had no effect, and replaying it from the dead-letter topic
		// once the cause is fixed must not be skipped as a duplicate.
		if err := w.c.Inserter.Forget(ctx, tx, it.Ev.ID); err != nil {
			return record.Infra("removing the dedup row of a failed event: %w", err)
		}
	}
	it.State = record.Rejected
	return nil
}

// tracedCall is call inside a handler span. A handler that swallowed a
// failed statement's error has failed (handle), and its span says so.
func (w *batcher) tracedCall(ctx context.Context, tx pgx.Tx, it *record.Item) error {
	ctx, end := w.c.Tracing.HandlerSpan(ctx, it, w.c.Secrets)
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
