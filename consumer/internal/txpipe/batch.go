package txpipe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer/envelope"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/segmentio/kafka-go"
)

// process runs one batch to the point where its offset may be committed: the
// database transaction has committed and every dead letter is acknowledged.
// It returns the offset to commit (the last record's offset + 1), or
// partition.ErrAbandoned, or a fatal error (event.ErrStopped).
//
// The batch normally commits in one transaction. After the server ended a
// transaction for running or idling too long (idle_in_transaction_session_timeout,
// transaction_timeout), the records are committed in smaller transactions
// (see txGuard), each recording its own ids; the offset still moves once,
// after all of them.
func (w *batcher) process(batch []kafka.Message) (next int64, err error) {
	c := w.c
	items := make([]record.Item, len(batch))
	if bs := w.StartBatchSpan(batch); bs.On() {
		defer func() { bs.End(record.Ptrs(items), spanError(err), c.Secrets) }()
	}
	for i := range batch {
		w.Decode(&items[i], batch[i])
		if it := &items[i]; it.State == record.Rejected && it.Policy == event.PolicyStop {
			return 0, it.StopError()
		}
	}

	bo := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	w.guard.safe = false
	redos := 0
	// split bounds the records per transaction for the rest of this batch
	// after the server refused a COMMIT (0: no bound); see commitRefused.
	split := 0
	// retry is the event whose handler failed and is to be called again
	// after the pause retryWait, taken with no transaction open once the
	// events before it are committed (see retryError).
	var retry *record.Item
	var retryWait time.Duration
	for done := 0; done < len(items); {
		n := w.guard.size(len(items) - done)
		if split > 0 && split < n {
			n = split
		}
		if retry != nil {
			if k := indexOf(items[done:], retry); k == 0 {
				if !w.retryPause(retryWait) {
					return 0, partition.ErrAbandoned
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
					re.poison.Poison = re.poisonText
					if errors.Is(re.err, errTxEnded) {
						markOwnRows(part, re.poison)
					}
				}
				w.Log.Debug("batch transaction given up; redoing it with a savepoint round trip per event", "err", redact.Err(re.err, c.Secrets...))
				continue
			}
			err = &record.InfraError{Err: re}
		}
		var ie *record.InfraError
		if !errors.As(err, &ie) {
			return 0, err // partition.ErrAbandoned, event.ErrStopped or a *partition.RewindError
		}
		if w.splitRefused(part, err, &split) {
			continue
		}
		if !w.txFailed(part, err, bo) {
			return 0, partition.ErrAbandoned
		}
	}
	next = batch[len(batch)-1].Offset + 1
	if h := c.AfterDBCommit; h != nil {
		if err := h(w.Partition, next); err != nil {
			return 0, err
		}
	}
	if c.Replay == nil { // a replay's went out with its transactions
		if err := w.DeadLetter(items); err != nil {
			return 0, err
		}
	}
	w.count(items)
	return next, nil
}

// indexOf returns the index of it in items, or -1.
func indexOf(items []record.Item, it *record.Item) int {
	for i := range items {
		if &items[i] == it {
			return i
		}
	}
	return -1
}

// partCommitted records a part's committed transaction: metrics, health,
// the transaction size guard and the position the database now holds.
func (w *batcher) partCommitted(part []record.Item, start time.Time) {
	c := w.c
	c.Metrics.TxSeconds.Observe(time.Since(start).Seconds())
	c.Health.DBSucceeded()
	if d := c.Health.OK(telemetry.CompDatabase); d > 0 {
		w.Log.Info("database reachable again", "outage", d.Round(time.Millisecond))
	}
	w.guard.committed(c.BatchSize)
	if !c.DisableDedup {
		// The part recorded its position: the next part's check
		// must find the database behind if it lost this one.
		w.DBPos = part[len(part)-1].Msg.Offset + 1
	}
}

// splitRefused handles a COMMIT the database refused (commitRefused): it
// halves the part (*split), or poisons the part's one event; true if the
// part is to be tried again so.
func (w *batcher) splitRefused(part []record.Item, err error, split *int) bool {
	c := w.c
	if refused := commitRefused(err); refused != nil {
		// A deferred constraint or trigger refused the COMMIT because
		// of what some handler wrote: retrying the same transaction
		// would fail forever. Split the transaction until the event is
		// alone, then take it as that event's failure.
		if len(part) > 1 {
			*split = len(part) / 2
			w.Log.Debug("the database refused the commit; splitting the transaction", "records", len(part), "err", redact.Err(refused, c.Secrets...))
			return true
		}
		if it := &part[0]; it.State == record.Handled && it.Poison == "" {
			it.Poison = redact.Text("the database refused to commit the event's writes: "+refused.Error(), c.Secrets...)
			return true
		}
	}
	return false
}

// txFailed handles a failed batch transaction: after a server-side timeout it
// commits fewer records per transaction, otherwise it reports the database's
// failure and pauses. False if the generation ended or shutdown timed out
// during the pause.
func (w *batcher) txFailed(part []record.Item, err error, bo *backoff.Backoff) bool {
	c := w.c
	timeout := isServerTimeout(err)
	err = redact.Err(err, c.Secrets...)
	if timeout && w.guard.shrink(len(part)) {
		// Retrying the same transaction would run into the same timeout
		// forever (and repeat every handler's external calls): commit
		// fewer records per transaction instead.
		c.Metrics.TxTimeouts.WithLabelValues(c.Topic).Inc()
		if !w.guard.logged {
			w.guard.logged = true
			w.Log.Warn("the database ended the batch transaction (server-side timeout); committing fewer records per transaction",
				"err", err, "records", len(part), "limit", w.guard.limit)
		} else {
			w.Log.Debug("server-side timeout again; records per transaction reduced", "records", len(part), "limit", w.guard.limit)
		}
		return true
	}
	c.Metrics.InfraErrors.WithLabelValues(telemetry.CompDatabase).Inc()
	if c.Health.Fail(telemetry.CompDatabase, err) {
		msg := "batch transaction failed; pausing and retrying"
		if timeout {
			// One record's handler alone outlasts the server's timeout:
			// nothing the runtime can split further.
			msg = "the database ended a one-record transaction (server-side timeout): raise idle_in_transaction_session_timeout or transaction_timeout above the handler's duration; pausing and retrying"
		}
		w.Log.Warn(msg, "err", err, "records", len(part))
	} else {
		w.Log.Debug("batch transaction failed again", "err", err)
	}
	return w.Pause(bo.Next())
}

// markOwnRows flags the events of part after poison whose handlers had not
// run when poison's handler ended the transaction, and whose ids were fresh
// in it (see item.OwnRow); it clears the flag of the others, whose rows, if
// committed, hold their effects.
func markOwnRows(part []record.Item, poison *record.Item) {
	after := false
	for i := range part {
		it := &part[i]
		it.OwnRow = after && it.Decoded && it.State == record.Pending && it.Ev.Deduplicated
		if it == poison {
			after = true
		}
	}
}

// retryPause is the pause before a failed handler's next attempt, taken
// with no transaction open. A rebalance ends it (false: the batch is given
// up, the next owner gets it); a shutdown does not: the batch waits its
// pause out and finishes within the grace period, unless that ends first.
func (w *batcher) retryPause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	gen := w.GenCtx.Done()
	for {
		select {
		case <-gen:
			if w.RunCtx.Err() == nil {
				return false
			}
			gen = nil
		case <-w.HardCtx.Done():
			return false
		case <-t.C:
			return true
		}
	}
}

// transact runs one attempt of the batch transaction.
func (w *batcher) transact(items []record.Item) error {
	c := w.c
	ctx := w.HardCtx
	// Reset what a failed attempt may have decided.
	ids := make([]uuid.UUID, 0, len(items))
	pos := make([]int, 0, len(items))
	for i := range items {
		it := &items[i]
		if !it.Decoded {
			continue
		}
		// attempts carries over: an event's failed attempts count across
		// the transactions of its batch (see retryError).
		it.State, it.Reason, it.Policy, it.ErrText = record.Pending, "", "", ""
		it.Ev.Deduplicated = true
		ids = append(ids, it.Ev.ID)
		pos = append(pos, i)
	}

	tx, err := c.Pool.Begin(ctx)
	if err != nil {
		return record.Infra("beginning transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // no-op after Commit

	// The partition's position commits with the batch; recorded first, so a
	// database that lost earlier batches is found before any handler runs
	// (positions.go).
	if err := w.RecordPosition(ctx, tx, items); err != nil {
		return err
	}

	if len(ids) > 0 && !c.DisableDedup {
		res, err := w.c.Inserter.Insert(ctx, tx, ids)
		if err != nil {
			return record.Infra("recording event ids: %w", err)
		}
		for k, i := range pos {
			it := &items[i]
			switch {
			case res.Outside[k]:
				it.Reason = event.ReasonOutsideWindow
				it.ErrText = fmt.Sprintf("event id %s (time %s) is outside the dedup window [%s, %s)",
					it.Ev.ID, envelope.Time(it.Ev.ID).Format(time.RFC3339), res.Window.From.Format(time.RFC3339), res.Window.To.Format(time.RFC3339))
				it.Policy = c.Policies[event.ReasonOutsideWindow]
				switch it.Policy {
				case event.PolicyProcess:
					it.Ev.Deduplicated = false
				case event.PolicyStop:
					return it.StopError()
				default:
					it.State = record.Rejected
				}
			case !res.Fresh[k] && !it.OwnRow:
				it.State = record.Duplicate
			}
		}
	}

	sps := newTxSavepoints(tx, w.guard.safe)
	for i := range items {
		if items[i].State != record.Pending {
			continue
		}
		if err := w.handle(ctx, tx, &items[i], sps); err != nil {
			return err
		}
	}
	rejectCopies(items)
	if r := c.Replay; r != nil {
		if err := r.Record(ctx, tx, w.Worker, record.Ptrs(items)); err != nil {
			return record.Infra("recording the replay's counts: %w", err)
		}
		// A replay's position in the database is all its progress (no
		// Kafka offset follows it): what it writes back goes out before
		// the position that passes it commits, so a crash between the two
		// writes it again rather than never (at least once, as the live
		// path's dead letters before its offset commit).
		if err := w.DeadLetter(items); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		// If the commit did happen after all, the retry finds every id
		// already recorded and runs no handler: the effect stays single.
		return record.Infra("committing: %w", &commitError{err})
	}
	return nil
}

// rejectCopies gives the later copies of an id whose handler failed in this
// batch that copy's outcome. They were found duplicates of it (the id had no
// row before the batch), but it took no effect and its row was taken back:
// like a copy in a batch of its own, each is dead-lettered (or skipped) with
// the same reason and error. A replay then writes each back, or parks it,
// rather than counting it as already applied.
func rejectCopies(items []record.Item) {
	var failed map[uuid.UUID]*record.Item
	for i := range items {
		it := &items[i]
		if it.Decoded && it.State == record.Rejected && it.Reason == event.ReasonHandlerFailed {
			if failed == nil {
				failed = map[uuid.UUID]*record.Item{}
			}
			if _, seen := failed[it.Ev.ID]; !seen {
				failed[it.Ev.ID] = it
			}
		}
	}
	if failed == nil {
		return
	}
	for i := range items {
		it := &items[i]
		f, ok := failed[it.Ev.ID]
		if !ok || it.State != record.Duplicate || !it.Decoded || it.Msg.Offset < f.Msg.Offset {
			continue
		}
		it.State, it.Reason, it.Policy, it.ErrText, it.Attempts = record.Rejected, f.Reason, f.Policy, f.ErrText, f.Attempts
	}
}

// count updates metrics and logs the batch's outcome, once it is final.
func (w *batcher) count(items []record.Item) {
	c := w.c
	t := c.Topic
	var handled, dups int
	for i := range items {
		it := &items[i]
		if it.Reason == event.ReasonOutsideWindow {
			c.Metrics.OutsideWindow.WithLabelValues(t).Inc()
		}
		switch it.State {
		case record.Handled:
			handled++
		case record.Duplicate:
			dups++
		case record.Rejected:
			attrs := []any{"offset", it.Msg.Offset, "reason", it.Reason, "policy", it.Policy, "err", it.ErrText}
			if it.Decoded {
				attrs = append(attrs, "eventId", it.Ev.ID)
			}
			switch it.Policy {
			case event.PolicyDeadLetter:
				c.Metrics.DeadLettered.WithLabelValues(t, string(it.Reason)).Inc()
				w.Log.Warn("event dead-lettered", attrs...)
			case event.PolicySkip:
				c.Metrics.Skipped.WithLabelValues(t, string(it.Reason)).Inc()
				w.Log.Warn("event skipped by policy", attrs...)
			}
		}
	}
	c.Metrics.Processed.WithLabelValues(t).Add(float64(handled))
	c.Metrics.Duplicates.WithLabelValues(t).Add(float64(dups))
	c.Metrics.BatchSize.Observe(float64(len(items)))
	c.Metrics.Batches.WithLabelValues(t).Inc()
	now, e2e := time.Now(), c.Metrics.EndToEnd.WithLabelValues(t)
	for i := range items {
		if ts := items[i].Msg.Time; !ts.IsZero() {
			e2e.Observe(now.Sub(ts).Seconds())
		}
	}
	w.Log.Debug("batch committed", "records", len(items), "handled", handled, "duplicates", dups,
		"first", items[0].Msg.Offset, "last", items[len(items)-1].Msg.Offset)
}

// spanError is the error a batch span ends with: a revoked partition's batch
// did not fail.
func spanError(err error) error {
	if errors.Is(err, partition.ErrAbandoned) {
		return nil
	}
	return err
}
