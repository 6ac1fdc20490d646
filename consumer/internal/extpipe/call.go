package extpipe

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
)

// callOutcome is what became of one record's handler calls.
type callOutcome uint8

const (
	outSucceeded callOutcome = iota // the handler returned nil
	outFailed                       // attempts used up, or Permanent: the handler_failed policy applies
	outDuplicate                    // another record with the same id succeeded first (claims.go)
	outAbandoned                    // the partition was revoked or shutdown ran out of time
	outMustCall                     // a copy waited off its lane: its id's first record failed or was given up (claims.go)
)

// callExternal runs the handler for r with retries, holding a MaxInFlight
// slot only while a call runs. Unavailable errors pause and retry without
// using an attempt, and so do RetryLater errors within RetryLaterMax.
func (p *partSession) callExternal(ctx context.Context, r *entry) callOutcome {
	c := p.c
	hctx := event.ContextWithEvent(ctx, &r.Ev)
	if r.HasTrace {
		hctx = event.ContextWithTrace(hctx, r.Trace)
	}
	bo := backoff.New(c.HandlerBackoff, c.HandlerBackoffMax)
	unavail := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	later := backoff.New(c.HandlerBackoff, c.HandlerBackoffMax)
	var paused time.Duration // RetryLater pauses so far, bounded by RetryLaterMax
	for attempt := 1; ; {
		if !c.Slots.acquire(ctx, r.prio) {
			return outAbandoned
		}
		c.XM.Calls.WithLabelValues(c.Topic).Inc()
		began := time.Now()
		err := p.tracedInvoke(hctx, r)
		c.Slots.release(time.Since(began))
		c.XM.Calls.WithLabelValues(c.Topic).Dec()
		if p.w.HardCtx.Err() != nil {
			// Returned after the shutdown timeout: Run gave the call up
			// (telemetry.Calls), and nothing of it is recorded.
			return outAbandoned
		}
		if err == nil {
			if c.Health.OK(telemetry.CompHandler) > 0 {
				p.w.Log.Info("the handler's dependency is available again")
			}
			return outSucceeded
		}
		if ctx.Err() != nil {
			return outAbandoned
		}
		c.Metrics.HandlerErrors.WithLabelValues(c.Topic).Inc()
		text := redact.Text(err.Error(), c.Secrets...)
		if event.IsUnavailable(err) {
			c.Metrics.InfraErrors.WithLabelValues(telemetry.CompHandler).Inc()
			if c.Health.Fail(telemetry.CompHandler, errors.New(text)) {
				p.w.Log.Warn("the handler's dependency is unavailable; pausing the event and retrying", "offset", r.Ev.Offset, "eventId", r.Ev.ID, "err", text)
			}
			if !backoff.Sleep(ctx, unavail.Next()) {
				return outAbandoned
			}
			continue
		}
		if d, ok := event.RetryLaterAfter(err); ok && paused < c.RetryLaterMax {
			// Asked to call again later (a Retry-After, a key still being
			// processed): a pause that uses no attempt, within RetryLaterMax
			// for the event. No transaction is open here.
			if d <= 0 {
				d = later.Next()
			}
			d = min(d, c.RetryLaterMax-paused)
			paused += d
			r.ErrText = text
			c.XM.RetryLater.WithLabelValues(c.Topic).Inc()
			p.w.Log.Debug("handler asked to retry later; pausing without using an attempt", "offset", r.Ev.Offset, "eventId", r.Ev.ID, "pause", d, "err", text)
			if paused >= c.RetryLaterMax {
				p.w.Log.Warn("the handler's answers asked to retry later for RetryLaterMax; further ones use attempts", "offset", r.Ev.Offset, "eventId", r.Ev.ID, "retryLaterMax", c.RetryLaterMax, "err", text)
			}
			if !backoff.Sleep(ctx, d) {
				return outAbandoned
			}
			continue
		}
		r.Attempts, r.ErrText = attempt, text
		if event.IsPermanent(err) || attempt >= c.HandlerMaxAttempts {
			return outFailed
		}
		p.w.Log.Debug("handler failed; retrying", "offset", r.Ev.Offset, "eventId", r.Ev.ID, "attempt", attempt, "err", text)
		attempt++
		if !backoff.Sleep(ctx, bo.Next()) {
			return outAbandoned
		}
	}
}

// invoke runs the external handler, turning a panic into an error.
func (p *partSession) invoke(ctx context.Context, ev *event.Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			p.w.Log.Error("handler panicked", "offset", ev.Offset, "eventId", ev.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	defer p.c.Calls.Start(ev)()
	return p.c.Handler(ctx, ev)
}

// tracedInvoke is invoke inside a handler span.
func (p *partSession) tracedInvoke(ctx context.Context, r *entry) error {
	ctx, end := p.c.Tracing.HandlerSpan(ctx, &r.Item, p.c.Secrets)
	err := p.invoke(ctx, &r.Ev)
	end(err)
	return err
}
