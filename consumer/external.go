package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
)

// Ordering is which records of one partition may be handled concurrently.
type Ordering string

const (
	// OrderingPartition handles one record of a partition at a time, in
	// offset order. The only ordering of transactional handlers.
	OrderingPartition Ordering = "Partition"
	// OrderingKey handles records with different Kafka keys concurrently and
	// records with the same key one at a time in offset order. Records with
	// no key (nil or empty) share one key. The default of external handlers.
	OrderingKey Ordering = "Key"
	// OrderingUnordered handles any records concurrently.
	OrderingUnordered Ordering = "Unordered"
)

// Defaults of the processing model.
const (
	DefaultMaxInFlight              = 64
	DefaultIdleInTransactionTimeout = 5 * time.Second
	// maxLookAheadFactor times MaxInFlight is how many records one partition
	// holds fetched but not yet durably done.
	maxLookAheadFactor = 4
)

// ParseOrdering accepts an ordering name in any case.
func ParseOrdering(s string) (Ordering, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "partition":
		return OrderingPartition, nil
	case "key":
		return OrderingKey, nil
	case "unordered", "none":
		return OrderingUnordered, nil
	}
	return "", fmt.Errorf("%q is not Partition, Key or Unordered", s)
}

// validateConcurrency checks the processing-model fields (after defaults).
func (c Config) validateConcurrency() error {
	switch c.Ordering {
	case "", OrderingPartition, OrderingKey, OrderingUnordered:
	default:
		return cfgErr("Ordering", "%q is not Partition, Key or Unordered", c.Ordering)
	}
	if c.MaxInFlight < 0 || c.MaxInFlight > 10000 {
		return cfgErr("MaxInFlight", "%d is not between 1 and 10000", c.MaxInFlight)
	}
	if c.IdleInTransactionTimeout > 0 && c.IdleInTransactionTimeout < 100*time.Millisecond {
		return cfgErr("IdleInTransactionTimeout", "%v is below 100ms (a negative value leaves the server's setting)", c.IdleInTransactionTimeout)
	}
	return nil
}

// NewExternal validates cfg and returns a Consumer for a handler whose
// effects are outside the database (see ExternalHandler). Ordering defaults
// to OrderingKey and MaxInFlight to 64. It does not connect to anything.
func NewExternal(cfg Config, h ExternalHandler) (*Consumer, error) {
	if h == nil {
		return nil, cfgErr("Handler", "must not be nil")
	}
	if cfg.Ordering == "" {
		cfg.Ordering = OrderingKey
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	c, err := newConsumer(cfg, nil)
	if err != nil {
		return nil, err
	}
	c.external = h
	c.inFlight = newSlots(c.cfg.MaxInFlight)
	c.claims = newClaims()
	return c, nil
}

// RunExternal validates cfg, then consumes with an external handler until
// ctx is done or an event's reason has PolicyStop. See Consumer.Run.
func RunExternal(ctx context.Context, cfg Config, h ExternalHandler) error {
	c, err := NewExternal(cfg, h)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

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
func (p *xpart) callExternal(ctx context.Context, r *xrec) callOutcome {
	c := p.w.c
	hctx := ContextWithEvent(ctx, &r.Ev)
	if r.HasTrace {
		hctx = ContextWithTrace(hctx, r.Trace)
	}
	bo := backoff.New(c.cfg.HandlerBackoff, c.cfg.HandlerBackoffMax)
	unavail := backoff.New(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	later := backoff.New(c.cfg.HandlerBackoff, c.cfg.HandlerBackoffMax)
	var paused time.Duration // RetryLater pauses so far, bounded by RetryLaterMax
	for attempt := 1; ; {
		if !c.inFlight.acquire(ctx, r.prio) {
			return outAbandoned
		}
		c.xm.Calls.WithLabelValues(c.cfg.Topic).Inc()
		began := time.Now()
		err := p.tracedInvoke(hctx, r)
		c.inFlight.release(time.Since(began))
		c.xm.Calls.WithLabelValues(c.cfg.Topic).Dec()
		if p.w.hardCtx.Err() != nil {
			// Returned after the shutdown timeout: Run gave the call up
			// (inflight.go), and nothing of it is recorded.
			return outAbandoned
		}
		if err == nil {
			if c.health.OK(telemetry.CompHandler) > 0 {
				p.w.log.Info("the handler's dependency is available again")
			}
			return outSucceeded
		}
		if ctx.Err() != nil {
			return outAbandoned
		}
		c.metrics.HandlerErrors.WithLabelValues(c.cfg.Topic).Inc()
		text := redact.Text(err.Error(), c.secrets...)
		if IsUnavailable(err) {
			c.metrics.InfraErrors.WithLabelValues(telemetry.CompHandler).Inc()
			if c.health.Fail(telemetry.CompHandler, errors.New(text)) {
				p.w.log.Warn("the handler's dependency is unavailable; pausing the event and retrying", "offset", r.Ev.Offset, "eventId", r.Ev.ID, "err", text)
			}
			if !backoff.Sleep(ctx, unavail.Next()) {
				return outAbandoned
			}
			continue
		}
		if d, ok := RetryLaterAfter(err); ok && paused < c.cfg.RetryLaterMax {
			// Asked to call again later (a Retry-After, a key still being
			// processed): a pause that uses no attempt, within RetryLaterMax
			// for the event. No transaction is open here.
			if d <= 0 {
				d = later.Next()
			}
			d = min(d, c.cfg.RetryLaterMax-paused)
			paused += d
			r.ErrText = text
			c.xm.RetryLater.WithLabelValues(c.cfg.Topic).Inc()
			p.w.log.Debug("handler asked to retry later; pausing without using an attempt", "offset", r.Ev.Offset, "eventId", r.Ev.ID, "pause", d, "err", text)
			if paused >= c.cfg.RetryLaterMax {
				p.w.log.Warn("the handler's answers asked to retry later for RetryLaterMax; further ones use attempts", "offset", r.Ev.Offset, "eventId", r.Ev.ID, "retryLaterMax", c.cfg.RetryLaterMax, "err", text)
			}
			if !backoff.Sleep(ctx, d) {
				return outAbandoned
			}
			continue
		}
		r.Attempts, r.ErrText = attempt, text
		if IsPermanent(err) || attempt >= c.cfg.HandlerMaxAttempts {
			return outFailed
		}
		p.w.log.Debug("handler failed; retrying", "offset", r.Ev.Offset, "eventId", r.Ev.ID, "attempt", attempt, "err", text)
		attempt++
		if !backoff.Sleep(ctx, bo.Next()) {
			return outAbandoned
		}
	}
}

// invoke runs the external handler, turning a panic into an error.
func (p *xpart) invoke(ctx context.Context, ev *Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			p.w.log.Error("handler panicked", "offset", ev.Offset, "eventId", ev.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	defer p.w.c.calls.Start(ev)()
	return p.w.c.external(ctx, ev)
}
