package extpipe

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/envelope"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
)

// accept decodes fetched records into the window and queues them for the
// lookup.
func (p *partSession) accept(batch []kafka.Message) {
	defer p.traceAccept(batch)()
	c := p.c
	now := time.Now()
	for _, m := range batch {
		r := &entry{fetched: now, size: int64(len(m.Key) + len(m.Value))}
		p.w.Decode(&r.Item, m)
		p.window = append(p.window, r)
		if r.State == record.Passed {
			r.status = statusDone
			continue
		}
		if r.State == record.Rejected {
			p.reject(r)
			continue
		}
		r.Ev.Deduplicated = true
		// Registered before the lookup: see claims.
		r.claim, r.owner = c.Claims.register(r.Ev.ID, r, p)
		p.unlooked = append(p.unlooked, r)
	}
}

// startLookup looks the unlooked records' ids up on a goroutine of its own.
func (p *partSession) startLookup() {
	recs := p.unlooked
	p.unlooked = nil
	ids := make([]uuid.UUID, len(recs))
	for i, r := range recs {
		ids[i] = r.Ev.ID
	}
	p.lookBusy = true
	go func() {
		recorded, outside, err := p.lookup(ids)
		p.lookRes <- lookResult{recs: recs, recorded: recorded, outside: outside, err: err}
	}()
}

// looked applies a lookup's answer, in offset order, and starts the ready
// records.
func (p *partSession) looked(lr lookResult) {
	c := p.c
	for i, r := range lr.recs {
		switch {
		case lr.outside[i]:
			if r.owner {
				c.Claims.release(r.Ev.ID, r.claim)
			}
			r.claim, r.owner = nil, false
			w := c.Inserter.Window()
			r.Reason = event.ReasonOutsideWindow
			r.ErrText = fmt.Sprintf("event id %s (time %s) is outside the dedup window [%s, %s)",
				r.Ev.ID, envelope.Time(r.Ev.ID).Format(time.RFC3339), w.From.Format(time.RFC3339), w.To.Format(time.RFC3339))
			r.Policy = c.Policies[event.ReasonOutsideWindow]
			if r.Policy == event.PolicyProcess {
				r.Ev.Deduplicated = false
				p.ready(r)
				continue
			}
			r.State = record.Rejected
			p.reject(r)
		case lr.recorded[i]:
			if r.owner {
				c.Claims.resolve(r.Ev.ID, r.claim, true)
			}
			r.State, r.status = record.Duplicate, statusDone
		default:
			p.ready(r)
		}
	}
}

// reject applies a rejected record's policy.
func (p *partSession) reject(r *entry) {
	switch r.Policy {
	case event.PolicyStop:
		r.status = statusStuck
		if p.stopErr == nil {
			p.stopErr = r.Item.StopError()
			p.draining = true
		}
	case event.PolicySkip:
		r.status = statusDone
	default:
		r.status = statusFailed
	}
}

// lookup returns which ids are recorded and which are outside the window,
// retrying while the database is unreachable. It runs on its own goroutine
// (startLookup): it touches no session state.
func (p *partSession) lookup(ids []uuid.UUID) (recorded, outside []bool, err error) {
	w, c := p.w, p.c
	bo := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	for {
		ctx, cancel := context.WithTimeout(p.lookCtx, 30*time.Second)
		recorded, outside, err = c.Inserter.Recorded(ctx, c.Pool, ids)
		cancel()
		if err == nil {
			if d := c.Health.OK(telemetry.CompDatabase); d > 0 {
				w.Log.Info("database reachable again", "outage", d.Round(time.Millisecond))
			}
			return recorded, outside, nil
		}
		if p.lookCtx.Err() != nil {
			return nil, nil, errGenEnded
		}
		c.Metrics.InfraErrors.WithLabelValues(telemetry.CompDatabase).Inc()
		if err = redact.Err(err, c.Secrets...); c.Health.Fail(telemetry.CompDatabase, err) {
			w.Log.Warn("looking up event ids failed; pausing and retrying", "err", err)
		}
		if !backoff.Sleep(p.lookCtx, bo.Next()) {
			return nil, nil, errGenEnded
		}
	}
}
