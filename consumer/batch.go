package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-dev/operator/consumer/envelope"
)

type itemState uint8

const (
	stPending   itemState = iota // the handler is to run (or ran, once stHandled)
	stHandled                    // the handler succeeded
	stDuplicate                  // the id was processed before
	stRejected                   // a reason applies; its policy says what happens
)

// item is one record of a batch and what became of it.
type item struct {
	msg      kafka.Message
	ev       Event
	decoded  bool
	trace    TraceContext
	hasTrace bool
	// batch is the context of the span of the batch the record came in;
	// invalid when tracing is off (tracing.go).
	batch    trace.SpanContext
	state    itemState
	reason   Reason
	policy   Policy
	errText  string
	attempts int
	// poison is set when the event's handler ended the batch transaction
	// itself or left a query result open on its connection: the
	// transaction is redone without calling it again, and the event takes
	// the handler_failed policy with this error text.
	poison string
	// ownRow is set when a handler of an earlier event ended the batch
	// transaction before this event's handler ran: had it sent COMMIT, the
	// dedup row the runtime inserted for this event is committed, without
	// the event's effect. The redo then takes that row for this event's
	// own, not for an earlier processing, and runs the handler.
	ownRow bool
}

// infraError marks a failure of the database (or of a dependency the handler
// declared Unavailable): the batch is rolled back and retried, never
// dead-lettered.
type infraError struct{ err error }

func (e *infraError) Error() string { return e.err.Error() }
func (e *infraError) Unwrap() error { return e.err }

func infra(format string, err error) error {
	return &infraError{fmt.Errorf(format, err)}
}

// process runs one batch to the point where its offset may be committed: the
// database transaction has committed and every dead letter is acknowledged.
// It returns the offset to commit (the last record's offset + 1), or
// errAbandoned, or a fatal error (ErrStopped).
//
// The batch normally commits in one transaction. After the server ended a
// transaction for running or idling too long (idle_in_transaction_session_timeout,
// transaction_timeout), the records are committed in smaller transactions
// (see txGuard), each recording its own ids; the offset still moves once,
// after all of them.
func (w *worker) process(batch []kafka.Message) (next int64, err error) {
	c := w.c
	items := make([]item, len(batch))
	if bs := w.startBatchSpan(batch); bs.on() {
		defer func() { bs.end(itemPtrs(items), spanError(err), c.secrets) }()
	}
	for i := range batch {
		w.decode(&items[i], batch[i])
		if it := &items[i]; it.state == stRejected && it.policy == PolicyStop {
			return 0, w.stopError(it)
		}
	}

	bo := newBackoff(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	w.guard.safe = false
	redos := 0
	// split bounds the records per transaction for the rest of this batch
	// after the server refused a COMMIT (0: no bound); see commitRefused.
	split := 0
	for done := 0; done < len(items); {
		n := w.guard.size(len(items) - done)
		if split > 0 && split < n {
			n = split
		}
		part := items[done : done+n]
		start := time.Now()
		err := w.transact(part)
		if err == nil {
			c.metrics.txSeconds.Observe(time.Since(start).Seconds())
			c.health.dbSucceeded()
			if d := c.health.ok(compDatabase); d > 0 {
				w.log.Info("database reachable again", "outage", d.Round(time.Millisecond))
			}
			w.guard.committed(c.cfg.BatchSize)
			if !c.hooks.disableDedup {
				// The part recorded its position: the next part's check
				// must find the database behind if it lost this one.
				w.dbPos = part[len(part)-1].msg.Offset + 1
			}
			if split > 0 {
				split *= 2 // the refused record is behind us, or still ahead: either way, bisect
			}
			done += len(part)
			redos = 0
			bo.reset()
			continue
		}
		var re *redoError
		if errors.As(err, &re) {
			// Each redo either turns safe mode on or poisons another
			// event, so it ends; the bound only guards against a bug.
			if redos++; redos <= len(part)+1 {
				w.guard.safe = true
				if re.poison != nil {
					re.poison.poison = re.poisonText
					if errors.Is(re.err, errTxEnded) {
						markOwnRows(part, re.poison)
					}
				}
				w.log.Debug("batch transaction given up; redoing it with a savepoint round trip per event", "err", redactErr(re.err, c.secrets...))
				continue
			}
			err = &infraError{re}
		}
		var ie *infraError
		if !errors.As(err, &ie) {
			return 0, err // errAbandoned, ErrStopped or a *rewindError
		}
		if refused := commitRefused(err); refused != nil {
			// A deferred constraint or trigger refused the COMMIT because
			// of what some handler wrote: retrying the same transaction
			// would fail forever. Split the transaction until the event is
			// alone, then take it as that event's failure.
			if len(part) > 1 {
				split = len(part) / 2
				w.log.Debug("the database refused the commit; splitting the transaction", "records", len(part), "err", redactErr(refused, c.secrets...))
				continue
			}
			if it := &part[0]; it.state == stHandled && it.poison == "" {
				it.poison = redactText("the database refused to commit the event's writes: "+refused.Error(), c.secrets...)
				continue
			}
		}
		timeout := isServerTimeout(err)
		err = redactErr(err, c.secrets...)
		if timeout && w.guard.shrink(len(part)) {
			// Retrying the same transaction would run into the same timeout
			// forever (and repeat every handler's external calls): commit
			// fewer records per transaction instead.
			c.metrics.txTimeouts.WithLabelValues(c.cfg.Topic).Inc()
			if !w.guard.logged {
				w.guard.logged = true
				w.log.Warn("the database ended the batch transaction (server-side timeout); committing fewer records per transaction",
					"err", err, "records", len(part), "limit", w.guard.limit)
			} else {
				w.log.Debug("server-side timeout again; records per transaction reduced", "records", len(part), "limit", w.guard.limit)
			}
			continue
		}
		c.metrics.infraErrors.WithLabelValues(compDatabase).Inc()
		if c.health.fail(compDatabase, err) {
			msg := "batch transaction failed; pausing and retrying"
			if timeout {
				// One record's handler alone outlasts the server's timeout:
				// nothing the runtime can split further.
				msg = "the database ended a one-record transaction (server-side timeout): raise idle_in_transaction_session_timeout or transaction_timeout above the handler's duration; pausing and retrying"
			}
			w.log.Warn(msg, "err", err, "records", len(part))
		} else {
			w.log.Debug("batch transaction failed again", "err", err)
		}
		if !w.pause(bo.next()) {
			return 0, errAbandoned
		}
	}
	next = batch[len(batch)-1].Offset + 1
	if h := c.hooks.afterDBCommit; h != nil {
		if err := h(w.partition, next); err != nil {
			return 0, err
		}
	}
	if err := w.deadLetter(items); err != nil {
		return 0, err
	}
	w.count(items)
	return next, nil
}

// markOwnRows flags the events of part after poison whose handlers had not
// run when poison's handler ended the transaction, and whose ids were fresh
// in it (see item.ownRow); it clears the flag of the others, whose rows, if
// committed, hold their effects.
func markOwnRows(part []item, poison *item) {
	after := false
	for i := range part {
		it := &part[i]
		it.ownRow = after && it.decoded && it.state == stPending && it.ev.Deduplicated
		if it == poison {
			after = true
		}
	}
}

// pause waits d; false if the generation ended or shutdown timed out first.
func (w *worker) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.genCtx.Done():
		return false
	case <-w.hardCtx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *worker) decode(it *item, m kafka.Message) {
	c := w.c
	it.msg = m
	headers := make([]Header, len(m.Headers))
	eh := make([]envelope.Header, len(m.Headers))
	for i, h := range m.Headers {
		headers[i] = Header{Key: h.Key, Value: h.Value}
		eh[i] = envelope.Header{Key: h.Key, Value: h.Value}
	}
	it.ev = Event{Key: m.Key, Headers: headers, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	it.trace, it.hasTrace = traceFromHeaders(headers)
	it.batch = w.span
	d, err := envelope.Decode(m.Value, eh, c.cfg.Envelope)
	if err != nil {
		var de *envelope.Error
		if errors.As(err, &de) {
			it.reason = de.Reason
		} else {
			it.reason = ReasonNotJSON
		}
		it.errText = err.Error()
		it.state = stRejected
		it.policy = c.cfg.Policies[it.reason]
		return
	}
	it.decoded = true
	it.ev.ID, it.ev.Type, it.ev.OccurredAt, it.ev.Payload = d.ID, d.Type, d.OccurredAt, d.Payload
}

func (w *worker) stopError(it *item) error {
	return fmt.Errorf("%w: %s: %s partition %d offset %d: %s", ErrStopped, it.reason, it.msg.Topic, it.msg.Partition, it.msg.Offset, it.errText)
}

// transact runs one attempt of the batch transaction.
func (w *worker) transact(items []item) error {
	c := w.c
	ctx := w.hardCtx
	// Reset what a failed attempt may have decided.
	ids := make([]uuid.UUID, 0, len(items))
	pos := make([]int, 0, len(items))
	for i := range items {
		it := &items[i]
		if !it.decoded {
			continue
		}
		it.state, it.reason, it.policy, it.errText, it.attempts = stPending, "", "", "", 0
		it.ev.Deduplicated = true
		ids = append(ids, it.ev.ID)
		pos = append(pos, i)
	}

	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return infra("beginning transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // no-op after Commit

	// The partition's position commits with the batch; recorded first, so a
	// database that lost earlier batches is found before any handler runs
	// (positions.go).
	if err := w.recordPosition(ctx, tx, items); err != nil {
		return err
	}

	if len(ids) > 0 && !c.hooks.disableDedup {
		res, err := w.inserter.Insert(ctx, tx, ids)
		if err != nil {
			return infra("recording event ids: %w", err)
		}
		for k, i := range pos {
			it := &items[i]
			switch {
			case res.Outside[k]:
				it.reason = ReasonOutsideWindow
				it.errText = fmt.Sprintf("event id %s (time %s) is outside the dedup window [%s, %s)",
					it.ev.ID, envelope.Time(it.ev.ID).Format(time.RFC3339), res.Window.From.Format(time.RFC3339), res.Window.To.Format(time.RFC3339))
				it.policy = c.cfg.Policies[ReasonOutsideWindow]
				switch it.policy {
				case PolicyProcess:
					it.ev.Deduplicated = false
				case PolicyStop:
					return w.stopError(it)
				default:
					it.state = stRejected
				}
			case !res.Fresh[k] && !it.ownRow:
				it.state = stDuplicate
			}
		}
	}

	sps := newTxSavepoints(tx, w.guard.safe)
	for i := range items {
		if items[i].state != stPending {
			continue
		}
		if err := w.handle(ctx, tx, &items[i], sps); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		// If the commit did happen after all, the retry finds every id
		// already recorded and runs no handler: the effect stays single.
		return infra("committing: %w", &commitError{err})
	}
	return nil
}

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
func (w *worker) handle(ctx context.Context, tx pgx.Tx, it *item, sps *txSavepoints) error {
	c := w.c
	if it.poison != "" {
		it.attempts, it.errText = 1, it.poison
		return w.handlerFailed(ctx, tx, it)
	}
	et := newEventTx(tx, sps)
	defer func() { et.done = true }()

	hctx := ContextWithEvent(ctx, &it.ev)
	if it.hasTrace {
		hctx = ContextWithTrace(hctx, it.trace)
	}
	pc := tx.Conn().PgConn()
	bo := newBackoff(c.cfg.HandlerBackoff, c.cfg.HandlerBackoffMax)
	for attempt := 1; ; attempt++ {
		err := w.tracedCall(hctx, et, it)
		if ctx.Err() != nil {
			return errAbandoned
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
			return &infraError{fmt.Errorf("opening the event's savepoint: %w", et.failed)}
		}
		if et.redo != nil {
			return &redoError{err: fmt.Errorf("the handler's statement broke the transaction before the event's savepoint was established: %w", et.redo)}
		}
		if pc.IsClosed() {
			if err == nil {
				err = errConnLost
			}
			return &infraError{fmt.Errorf("handler: %w", err)}
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
			it.state = stHandled
			return nil
		}
		c.metrics.handlerErrors.WithLabelValues(c.cfg.Topic).Inc()
		if handlerInfra(err) {
			return &infraError{fmt.Errorf("handler: %w", err)}
		}
		if et.opened {
			if _, rbErr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+et.savepoint()); rbErr != nil {
				if savepointGone(rbErr) {
					// This handler ended the transaction and went on in a
					// new one, or released the savepoint (see above).
					return w.txEnded(it, fmt.Errorf("%w (the runtime's savepoint was gone after it returned)", errTxEnded), err)
				}
				// The connection or transaction is gone: not the event's fault.
				return &infraError{fmt.Errorf("handler failed and rolling back to its savepoint failed: %w", errors.Join(err, rbErr))}
			}
		}
		it.attempts = attempt
		it.errText = redactText(err.Error(), c.secrets...)
		if IsPermanent(err) || attempt >= c.cfg.HandlerMaxAttempts {
			return w.handlerFailed(ctx, tx, it)
		}
		w.log.Debug("handler failed; retrying", "offset", it.ev.Offset, "eventId", it.ev.ID, "attempt", attempt, "err", it.errText)
		if !w.pause(bo.next()) {
			return errAbandoned
		}
	}
}

// txEnded is the redo of a transaction that the handler of it ended
// (ended wraps errTxEnded) or left unusable: it is not called again and
// takes the handler_failed policy, with its own error err, if any, in the
// text.
func (w *worker) txEnded(it *item, ended, err error) error {
	c := w.c
	c.metrics.handlerErrors.WithLabelValues(c.cfg.Topic).Inc()
	text := ended.Error()
	if err != nil {
		text += ": " + err.Error()
	}
	return &redoError{err: ended, poison: it, poisonText: redactText(text, c.secrets...)}
}

// call runs the handler, turning a panic into an error.
func (w *worker) call(ctx context.Context, tx pgx.Tx, ev *Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("handler panicked", "offset", ev.Offset, "eventId", ev.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return w.c.handler(ctx, tx, ev)
}

// handlerFailed applies the handler_failed policy to an event whose attempts
// are used up.
func (w *worker) handlerFailed(ctx context.Context, tx pgx.Tx, it *item) error {
	it.reason = ReasonHandlerFailed
	it.policy = w.c.cfg.Policies[ReasonHandlerFailed]
	if it.policy == PolicyStop {
		return w.stopError(it)
	}
	if it.ev.Deduplicated && !w.c.hooks.disableDedup {
		// Take the id back out of the dedup table, in this transaction: the
		// event had no effect, and replaying it from the dead-letter topic
		// once the cause is fixed must not be skipped as a duplicate.
		if err := w.c.forget(ctx, tx, it.ev.ID); err != nil {
			return infra("removing the dedup row of a failed event: %w", err)
		}
	}
	it.state = stRejected
	return nil
}

// deadLetter writes the batch's dead letters, retrying until the broker has
// them all or the generation ends.
func (w *worker) deadLetter(items []item) error {
	c := w.c
	var msgs []kafka.Message
	now := time.Now()
	for i := range items {
		it := &items[i]
		if it.state == stRejected && it.policy == PolicyDeadLetter {
			msgs = append(msgs, c.deadLetterMessage(it, now))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	bo := newBackoff(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	for {
		err := c.writeDeadLetters(w.hardCtx, msgs)
		if err == nil {
			if d := c.health.ok(compDLQ); d > 0 {
				w.log.Info("dead-letter topic writable again", "outage", d.Round(time.Millisecond))
			}
			return nil
		}
		c.metrics.infraErrors.WithLabelValues(compDLQ).Inc()
		err = redactErr(err, c.secrets...)
		if c.health.fail(compDLQ, err) {
			w.log.Warn("writing to the dead-letter topic failed; retrying, offset held", "err", err, "topic", c.cfg.DeadLetterTopic)
		}
		if !w.pause(bo.next()) {
			return errAbandoned
		}
	}
}

// count updates metrics and logs the batch's outcome, once it is final.
func (w *worker) count(items []item) {
	c := w.c
	t := c.cfg.Topic
	var handled, dups int
	for i := range items {
		it := &items[i]
		if it.reason == ReasonOutsideWindow {
			c.metrics.outsideWindow.WithLabelValues(t).Inc()
		}
		switch it.state {
		case stHandled:
			handled++
		case stDuplicate:
			dups++
		case stRejected:
			attrs := []any{"offset", it.msg.Offset, "reason", it.reason, "policy", it.policy, "err", it.errText}
			if it.decoded {
				attrs = append(attrs, "eventId", it.ev.ID)
			}
			switch it.policy {
			case PolicyDeadLetter:
				c.metrics.deadLettered.WithLabelValues(t, string(it.reason)).Inc()
				w.log.Warn("event dead-lettered", attrs...)
			case PolicySkip:
				c.metrics.skipped.WithLabelValues(t, string(it.reason)).Inc()
				w.log.Warn("event skipped by policy", attrs...)
			}
		}
	}
	c.metrics.processed.WithLabelValues(t).Add(float64(handled))
	c.metrics.duplicates.WithLabelValues(t).Add(float64(dups))
	c.metrics.batchSize.Observe(float64(len(items)))
	c.metrics.batches.WithLabelValues(t).Inc()
	w.log.Debug("batch committed", "records", len(items), "handled", handled, "duplicates", dups,
		"first", items[0].msg.Offset, "last", items[len(items)-1].msg.Offset)
}
