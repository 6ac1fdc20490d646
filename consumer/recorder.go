package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
)

// flush makes the window's outcomes durable, in the order that keeps a crash
// at any point safe: the successful ids and the partition's position in one
// short transaction, then the dead letters, then the Kafka offset up to the
// contiguous prefix of records that are done. The prefix is then removed
// from the window.
func (p *xpart) flush() error {
	w, c := p.w, p.c
	var ids []uuid.UUID
	var succ []*xrec
	for _, r := range p.window {
		if r.status == xSucceeded {
			ids = append(ids, r.ev.ID)
			succ = append(succ, r)
		}
	}
	k := 0
	for k < len(p.window) {
		if s := p.window[k].status; s != xSucceeded && s != xFailed && s != xDone {
			break
		}
		k++
	}
	if len(ids) == 0 && k == 0 {
		return nil
	}
	next := int64(-1)
	if k > 0 {
		next = p.window[k-1].msg.Offset + 1
	}
	if len(ids) > 0 || (next >= 0 && next != w.dbPos) {
		if h := c.hooks.beforeRecord; h != nil {
			if err := h(w.partition, ids); err != nil {
				return err
			}
		}
		if err := p.record(ids, succ, next); err != nil {
			return err
		}
	}
	if err := p.deadLetters(); err != nil {
		return err
	}
	if next > p.committed {
		hw := p.window[k-1].msg.HighWaterMark
		ok := w.commit(next, hw)
		p.committed = next
		if !ok && w.genCtx.Err() == nil {
			return errAbandoned
		}
	}
	for _, r := range p.window[:k] {
		if r.claim != nil && r.owner {
			c.claims.release(r.ev.ID, r.claim)
		}
		p.bytes.Add(-r.size)
		p.w.mem.releaseRecord(&r.msg)
		p.countDone(r)
		<-p.room
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
// (after it ended, once). next < 0 records no position.
func (p *xpart) record(ids []uuid.UUID, succ []*xrec, next int64) error {
	w, c := p.w, p.c
	bo := newBackoff(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	for {
		start := time.Now()
		err := p.recordOnce(ids, succ, next)
		if err == nil {
			c.metrics.txSeconds.Observe(time.Since(start).Seconds())
			c.health.dbSucceeded()
			if d := c.health.ok(compDatabase); d > 0 {
				w.log.Info("database reachable again", "outage", d.Round(time.Millisecond))
			}
			if next >= 0 {
				w.dbPos = next
			}
			for _, r := range succ {
				r.status = xDone
			}
			c.xm.records.WithLabelValues(c.cfg.Topic).Add(float64(len(ids)))
			return nil
		}
		var rw *rewindError
		if errors.As(err, &rw) {
			return err
		}
		c.metrics.infraErrors.WithLabelValues(compDatabase).Inc()
		err = redactErr(err, c.secrets...)
		if c.health.fail(compDatabase, err) {
			w.log.Warn("recording handled events failed; pausing and retrying", "err", err, "records", len(ids))
		}
		if !w.pause(bo.next()) {
			return errAbandoned
		}
	}
}

// recordOnce is one attempt of the recording transaction.
func (p *xpart) recordOnce(ids []uuid.UUID, succ []*xrec, next int64) error {
	w, c := p.w, p.c
	ctx, cancel := context.WithTimeout(w.hardCtx, 30*time.Second)
	defer cancel()
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return infra("beginning transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // no-op after Commit
	if next >= 0 {
		prev, ok, err := c.positions.Record(ctx, tx, c.cfg.Topic, w.partition, next)
		if err != nil {
			return infra("recording the partition's position: %w", err)
		}
		if err := w.behind(prev, ok); err != nil {
			return err
		}
	}
	if len(ids) > 0 {
		res, err := c.inserter.Insert(ctx, tx, ids)
		if err != nil {
			return infra("recording event ids: %w", err)
		}
		for i, r := range succ {
			if res.Outside[i] {
				// The window moved between the lookup and now: the call
				// happened, and its id can't be recorded.
				w.log.Warn("a handled event's id left the dedup window before it was recorded; a redelivery of it would be called again",
					"offset", r.ev.Offset, "eventId", r.ev.ID)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return infra("committing: %w", err)
	}
	return nil
}

// deadLetters writes the window's pending dead letters (acks=all).
func (p *xpart) deadLetters() error {
	var items []item
	var recs []*xrec
	for _, r := range p.window {
		if r.status == xFailed {
			items = append(items, r.item)
			recs = append(recs, r)
		}
	}
	if len(items) == 0 {
		return nil
	}
	if err := p.w.deadLetter(items); err != nil {
		return err
	}
	for _, r := range recs {
		r.status = xDone
	}
	return nil
}

// countDone updates metrics and logs a record's outcome once it is durable.
func (p *xpart) countDone(r *xrec) {
	c := p.c
	t := c.cfg.Topic
	if r.reason == ReasonOutsideWindow {
		c.metrics.outsideWindow.WithLabelValues(t).Inc()
	}
	switch r.state {
	case stHandled:
		c.metrics.processed.WithLabelValues(t).Inc()
	case stDuplicate:
		c.metrics.duplicates.WithLabelValues(t).Inc()
	case stRejected:
		attrs := []any{"offset", r.msg.Offset, "reason", r.reason, "policy", r.policy, "err", r.errText}
		if r.decoded {
			attrs = append(attrs, "eventId", r.ev.ID)
		}
		switch r.policy {
		case PolicyDeadLetter:
			c.metrics.deadLettered.WithLabelValues(t, string(r.reason)).Inc()
			p.w.log.Warn("event dead-lettered", attrs...)
		case PolicySkip:
			c.metrics.skipped.WithLabelValues(t, string(r.reason)).Inc()
			p.w.log.Warn("event skipped by policy", attrs...)
		}
	}
}
