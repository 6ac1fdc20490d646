package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-dev/operator/consumer/envelope"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
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

	bo := backoff.New(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	w.guard.safe = false
	redos := 0
	// split bounds the records per transaction for the rest of this batch
	// after the server refused a COMMIT (0: no bound); see commitRefused.
	split := 0
	// retry is the event whose handler failed and is to be called again
	// after the pause retryWait, taken with no transaction open once the
	// events before it are committed (see retryError).
	var retry *item
	var retryWait time.Duration
	for done := 0; done < len(items); {
		n := w.guard.size(len(items) - done)
		if split > 0 && split < n {
			n = split
		}
		if retry != nil {
			if k := indexOf(items[done:], retry); k == 0 {
				if !w.retryPause(retryWait) {
					return 0, errAbandoned
				}
				retry = nil
			} else if k > 0 && k < n {
				n = k
			}
		}
		part := items[done : done+n]
		start := time.Now()
		err := w.transact(part)
		if err == nil {
			w.partCommitted(part, start)
			if split > 0 {
				split *= 2 // the refused record is behind us, or still ahead: either way, bisect
			}
			done += len(part)
			redos = 0
			bo.Reset()
			continue
		}
		var rt *retryError
		if errors.As(err, &rt) {
			// Rolled back (transact ended the transaction): pause before
			// the failed event, committing the ones before it first.
			retry, retryWait = rt.it, rt.wait
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
				w.log.Debug("batch transaction given up; redoing it with a savepoint round trip per event", "err", redact.Err(re.err, c.secrets...))
				continue
			}
			err = &infraError{re}
		}
		var ie *infraError
		if !errors.As(err, &ie) {
			return 0, err // errAbandoned, ErrStopped or a *rewindError
		}
		if w.splitRefused(part, err, &split) {
			continue
		}
		if !w.txFailed(part, err, bo) {
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

// indexOf returns the index of it in items, or -1.
func indexOf(items []item, it *item) int {
	for i := range items {
		if &items[i] == it {
			return i
		}
	}
	return -1
}

// partCommitted records a part's committed transaction: metrics, health,
// the transaction size guard and the position the database now holds.
func (w *worker) partCommitted(part []item, start time.Time) {
	c := w.c
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
}

// splitRefused handles a COMMIT the database refused (commitRefused): it
// halves the part (*split), or poisons the part's one event; true if the
// part is to be tried again so.
func (w *worker) splitRefused(part []item, err error, split *int) bool {
	c := w.c
	if refused := commitRefused(err); refused != nil {
		// A deferred constraint or trigger refused the COMMIT because
		// of what some handler wrote: retrying the same transaction
		// would fail forever. Split the transaction until the event is
		// alone, then take it as that event's failure.
		if len(part) > 1 {
			*split = len(part) / 2
			w.log.Debug("the database refused the commit; splitting the transaction", "records", len(part), "err", redact.Err(refused, c.secrets...))
			return true
		}
		if it := &part[0]; it.state == stHandled && it.poison == "" {
			it.poison = redact.Text("the database refused to commit the event's writes: "+refused.Error(), c.secrets...)
			return true
		}
	}
	return false
}

// txFailed handles a failed batch transaction: after a server-side timeout it
// commits fewer records per transaction, otherwise it reports the database's
// failure and pauses. False if the generation ended or shutdown timed out
// during the pause.
func (w *worker) txFailed(part []item, err error, bo *backoff.Backoff) bool {
	c := w.c
	timeout := isServerTimeout(err)
	err = redact.Err(err, c.secrets...)
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
		return true
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
	return w.pause(bo.Next())
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

// retryPause is the pause before a failed handler's next attempt, taken
// with no transaction open. A rebalance ends it (false: the batch is given
// up, the next owner gets it); a shutdown does not: the batch waits its
// pause out and finishes within the grace period, unless that ends first.
func (w *worker) retryPause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	gen := w.genCtx.Done()
	for {
		select {
		case <-gen:
			if w.runCtx.Err() == nil {
				return false
			}
			gen = nil
		case <-w.hardCtx.Done():
			return false
		case <-t.C:
			return true
		}
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
	it.trace, it.hasTrace = event.TraceFromHeaders(headers)
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
		// attempts carries over: an event's failed attempts count across
		// the transactions of its batch (see retryError).
		it.state, it.reason, it.policy, it.errText = stPending, "", "", ""
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
	bo := backoff.New(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	for {
		err := c.writeDeadLetters(w.hardCtx, msgs)
		if err == nil {
			if d := c.health.ok(compDLQ); d > 0 {
				w.log.Info("dead-letter topic writable again", "outage", d.Round(time.Millisecond))
			}
			return nil
		}
		c.metrics.infraErrors.WithLabelValues(compDLQ).Inc()
		err = redact.Err(err, c.secrets...)
		if c.health.fail(compDLQ, err) {
			w.log.Warn("writing to the dead-letter topic failed; retrying, offset held", "err", err, "topic", c.cfg.DeadLetterTopic)
		}
		if !w.pause(bo.Next()) {
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
