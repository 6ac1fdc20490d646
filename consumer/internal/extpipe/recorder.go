package extpipe

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
)

// recJob is one recording job of a partition: the ids of the succeeded
// records (succ), the failed records to dead-letter, and the contiguous
// prefix of the window that is done once they are (k records, the next
// offset after them: next, -1 if none).
type recJob struct {
	ids    []uuid.UUID
	succ   []*entry
	failed []*entry
	k      int
	// done are the k records' items, for the replay's counts (nil for
	// the live consumer).
	done []*record.Item
	next int64
	hw   int64
	err  error
}

// startRecording starts a recording job for what the window holds finished,
// on a goroutine of its own (one job at a time per partition): the session's
// loop goes on starting calls while it runs. It makes the outcomes durable
// in the order that keeps a crash at any point safe: the successful ids and
// the partition's position in one short transaction, then the dead letters,
// then the Kafka offset up to the contiguous prefix of records that are
// done. The loop removes the prefix from the window when the job is over
// (recorded).
func (p *partSession) startRecording() error {
	job := &recJob{next: -1}
	head := true
	for _, r := range p.window {
		switch r.status {
		case statusSucceeded:
			job.ids = append(job.ids, r.Ev.ID)
			job.succ = append(job.succ, r)
			r.status = statusRecording
		case statusFailed:
			job.failed = append(job.failed, r)
			r.status = statusRecording
		case statusDone:
		default:
			head = false
		}
		if head {
			job.k++
		}
	}
	if job.k > 0 {
		last := p.window[job.k-1].Msg
		job.next, job.hw = last.Offset+1, last.HighWaterMark
		if p.c.Replay != nil {
			job.done = make([]*record.Item, job.k)
			for i, r := range p.window[:job.k] {
				job.done[i] = &r.Item
			}
		}
	}
	if len(job.ids) == 0 && len(job.failed) == 0 && job.k == 0 {
		return nil
	}
	p.recBusy = true
	go func() {
		job.err = p.runJob(job)
		p.recRes <- job
	}()
	return nil
}

// runJob runs a recording job. It touches no session state but the
// partition's position (w.DBPos) and p.committed, which only recording jobs
// use while a session runs, one at a time.
func (p *partSession) runJob(job *recJob) error {
	w, c := p.w, p.c
	deadLetter := func() error {
		if len(job.failed) == 0 {
			return nil
		}
		items := make([]record.Item, len(job.failed))
		for i, r := range job.failed {
			items[i] = r.Item
		}
		return w.DeadLetter(items)
	}
	// A replay's position in the database is all its progress (no Kafka
	// offset follows it): what it writes back goes out before the
	// recording that may move the position past it, so a crash between
	// the two writes it again rather than never (at least once, as the
	// live path's dead letters before its offset commit).
	if c.Replay != nil {
		if err := deadLetter(); err != nil {
			return err
		}
	}
	if len(job.ids) > 0 || (job.next >= 0 && job.next != w.DBPos) {
		if h := c.BeforeRecord; h != nil {
			if err := h(w.Partition, job.ids); err != nil {
				return err
			}
		}
		if err := p.record(job.ids, job.succ, job.done, job.next); err != nil {
			return err
		}
		if h := c.AfterRecord; h != nil {
			if err := h(w.Partition, job.next); err != nil {
				return err
			}
		}
	}
	if c.Replay == nil {
		if err := deadLetter(); err != nil {
			return err
		}
	}
	if job.next > p.committed {
		ok := w.Commit(job.next, job.hw)
		p.committed = job.next
		if !ok && w.GenCtx.Err() == nil {
			return partition.ErrAbandoned
		}
	}
	return nil
}

// recorded takes a finished job back into the loop: its records are done,
// and the done prefix leaves the window.
func (p *partSession) recorded(job *recJob) error {
	if job.err != nil {
		return job.err
	}
	c := p.c
	for _, r := range job.succ {
		r.status = statusDone
	}
	for _, r := range job.failed {
		r.status = statusDone
	}
	k := job.k
	for _, r := range p.window[:k] {
		if r.claim != nil && r.owner {
			c.Claims.release(r.Ev.ID, r.claim)
		}
		p.bytes.Add(-r.size)
		p.w.Mem.ReleaseRecord(&r.Msg)
		p.countDone(r)
		if r.lent {
			p.lent--
		} else {
			<-p.room
		}
	}
	select {
	case p.freed <- struct{}{}:
	default:
	}
	clear(p.window[:k])
	p.window = p.window[k:]
	return nil
}

// record runs the recording transaction, retrying while the generation lasts
// (after it ended, once). next < 0 records no position. Once it commits,
// records of other partitions waiting for these ids (claims) are released.
func (p *partSession) record(ids []uuid.UUID, succ []*entry, done []*record.Item, next int64) error {
	w, c := p.w, p.c
	bo := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	for {
		start := time.Now()
		outside, err := p.recordOnce(ids, succ, done, next)
		if err == nil {
			c.Metrics.TxSeconds.Observe(time.Since(start).Seconds())
			c.Health.DBSucceeded()
			if d := c.Health.OK(telemetry.CompDatabase); d > 0 {
				w.Log.Info("database reachable again", "outage", d.Round(time.Millisecond))
			}
			if next >= 0 {
				w.DBPos = next
			}
			for i, r := range succ {
				if r.claim != nil && r.owner {
					c.Claims.resolve(r.Ev.ID, r.claim, outside == nil || !outside[i])
				}
			}
			c.XM.Records.WithLabelValues(c.Topic).Add(float64(len(ids)))
			return nil
		}
		var rw *partition.RewindError
		if errors.As(err, &rw) {
			return err
		}
		c.Metrics.InfraErrors.WithLabelValues(telemetry.CompDatabase).Inc()
		err = redact.Err(err, c.Secrets...)
		if c.Health.Fail(telemetry.CompDatabase, err) {
			w.Log.Warn("recording handled events failed; pausing and retrying", "err", err, "records", len(ids))
		}
		if !w.Pause(bo.Next()) {
			return partition.ErrAbandoned
		}
	}
}

// recordOnce is one attempt of the recording transaction. It returns which
// ids were outside the dedup window (not recorded), nil if none was. A
// replay's counts of the done records go in it with the position.
func (p *partSession) recordOnce(ids []uuid.UUID, succ []*entry, done []*record.Item, next int64) (outside []bool, err error) {
	w, c := p.w, p.c
	ctx, cancel := context.WithTimeout(w.HardCtx, 30*time.Second)
	defer cancel()
	tx, err := c.Pool.Begin(ctx)
	if err != nil {
		return nil, record.Infra("beginning transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // no-op after Commit
	if next >= 0 {
		prev, ok, err := c.Positions.Record(ctx, tx, c.PosKey(), w.Partition, next)
		if err != nil {
			return nil, record.Infra("recording the partition's position: %w", err)
		}
		if err := w.Behind(prev, ok); err != nil {
			return nil, err
		}
	}
	if len(ids) > 0 {
		res, err := c.Inserter.Insert(ctx, tx, ids)
		if err != nil {
			return nil, record.Infra("recording event ids: %w", err)
		}
		for i, r := range succ {
			if res.Outside[i] {
				// The window moved between the lookup and now: the call
				// happened, and its id can't be recorded.
				w.Log.Warn("a handled event's id left the dedup window before it was recorded; a redelivery of it would be called again",
					"offset", r.Ev.Offset, "eventId", r.Ev.ID)
				outside = res.Outside
			}
		}
	}
	if r := c.Replay; r != nil && next >= 0 {
		if err := r.Record(ctx, tx, w, done); err != nil {
			return nil, record.Infra("recording the replay's counts: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, record.Infra("committing: %w", err)
	}
	return outside, nil
}

// countDone updates metrics and logs a record's outcome once it is durable.
func (p *partSession) countDone(r *entry) {
	c := p.c
	t := c.Topic
	c.Metrics.ObserveEndToEnd(t, time.Now(), r.Msg.Time)
	if r.Reason == event.ReasonOutsideWindow {
		c.Metrics.OutsideWindow.WithLabelValues(t).Inc()
	}
	switch r.State {
	case record.Handled:
		c.Metrics.Processed.WithLabelValues(t).Inc()
	case record.Duplicate:
		c.Metrics.Duplicates.WithLabelValues(t).Inc()
	case record.Rejected:
		attrs := []any{"offset", r.Msg.Offset, "reason", r.Reason, "policy", r.Policy, "err", r.ErrText}
		if r.Decoded {
			attrs = append(attrs, "eventId", r.Ev.ID)
		}
		switch r.Policy {
		case event.PolicyDeadLetter:
			c.Metrics.DeadLettered.WithLabelValues(t, string(r.Reason)).Inc()
			p.w.Log.Warn("event dead-lettered", attrs...)
		case event.PolicySkip:
			c.Metrics.Skipped.WithLabelValues(t, string(r.Reason)).Inc()
			p.w.Log.Warn("event skipped by policy", attrs...)
		}
	}
}
