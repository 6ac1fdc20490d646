package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/envelope"
)

// The external protocol, per partition (docs/design.md, Decision 6): fetch
// and decode records into the partition's window; look the new ids up in
// one SELECT that takes no locks; skip those recorded as duplicates; call the
// handler for the others, concurrently as the ordering allows, with no
// transaction open; record the successful ids and the partition's position
// in one short transaction; write the dead letters; commit the offset up to
// the contiguous prefix of records that are durably done.

type xstatus uint8

const (
	xNew       xstatus = iota // fetched, not yet looked up
	xQueued                   // ready, waiting behind an earlier record of its lane
	xRunning                  // its handler calls are running
	xSucceeded                // the handler succeeded; the id is to be recorded
	xFailed                   // a dead letter is to be written
	xDone                     // durably done: recorded, duplicate, skipped or dead-lettered
	xStuck                    // never done in this session (PolicyStop, abandoned)
)

// xrec is one record of a partition's window.
type xrec struct {
	item
	status  xstatus
	claim   *claim // nil when the id is not deduplicated
	owner   bool
	fetched time.Time
	size    int64
}

type xresult struct {
	r   *xrec
	out callOutcome
}

// errGenEnded ends a session's loop when the generation ends.
var errGenEnded = errors.New("generation ended")

// xpart is one session of a partition under an external handler: from the
// assignment (or a rewind) until the generation ends.
type xpart struct {
	w         *worker
	c         *Consumer
	lookAhead int
	lanes     *lanes
	window    []*xrec // offset order
	fetched   chan kafka.Message
	results   chan xresult
	room      chan struct{} // one token per record fetched and not removed
	bytes     atomic.Int64  // key and value bytes of those records
	freed     chan struct{} // signals the fetcher that bytes were freed
	running   int
	draining  bool
	stopErr   error
	committed int64
	pending   int // this partition's share of the records_in_flight gauge
	waiting   int // and of records_waiting_for_key

	callCtx     context.Context
	cancelCalls context.CancelFunc
	stopFetch   context.CancelFunc
	fetchDone   chan struct{}
	wg          sync.WaitGroup
}

// runExternal processes the partition under the external handler until the
// generation ends, starting a new session after each rewind.
func (w *worker) runExternal() {
	defer w.c.xm.oldest.DeleteLabelValues(w.c.cfg.Topic, partLabel(w.partition))
	for {
		rw := w.xsession()
		if rw == nil || !w.rewind(rw) {
			return
		}
	}
}

func (w *worker) xsession() *rewindError {
	c := w.c
	n := max(c.cfg.MaxInFlight*maxLookAheadFactor, 16)
	p := &xpart{w: w, c: c, lookAhead: n, lanes: newLanes(c.cfg.Ordering), committed: -1,
		fetched: make(chan kafka.Message, n), results: make(chan xresult, n), room: make(chan struct{}, n),
		freed: make(chan struct{}, 1), fetchDone: make(chan struct{})}
	// Calls outlive the generation only at shutdown, for its grace period;
	// a revoked partition's calls end at once (cancelCalls below).
	p.callCtx, p.cancelCalls = context.WithCancel(w.hardCtx)
	defer p.cancelCalls()
	fctx, stopFetch := context.WithCancel(w.genCtx)
	p.stopFetch = stopFetch
	go p.fetch(fctx)
	defer p.close()

	err := p.loop()
	var rw *rewindError
	switch {
	case errors.Is(err, errGenEnded) || errors.Is(err, ErrStopped):
		if w.runCtx.Err() == nil && !errors.Is(err, ErrStopped) {
			p.cancelCalls() // a rebalance: the next owner calls again with the same ids
		}
		p.waitCalls()
		if ferr := p.flush(); ferr != nil && !errors.Is(ferr, errAbandoned) && !errors.As(ferr, &rw) {
			w.log.Warn("recording the partition's last results failed; its next owner redoes them", "err", redactErr(ferr, c.secrets...))
		}
		if errors.Is(err, ErrStopped) {
			w.fatal(err)
		}
		return nil
	case errors.As(err, &rw):
		p.cancelCalls()
		p.waitCalls()
		return rw
	case errors.Is(err, errAbandoned):
		p.cancelCalls()
		p.waitCalls()
		return nil
	default: // a crash (test hook) or a fatal error: nothing more is committed
		p.cancelCalls()
		p.waitCalls()
		w.fatal(err)
		return nil
	}
}

// close stops the fetcher and gives up what the window still holds.
func (p *xpart) close() {
	p.stopFetch()
	<-p.fetchDone
	for _, r := range p.window {
		if r.claim != nil && r.owner {
			p.c.claims.release(r.ev.ID, r.claim)
		}
		p.w.mem.releaseRecord(&r.msg)
	}
	for {
		select {
		case m := <-p.fetched:
			p.w.mem.releaseRecord(&m)
			continue
		default:
		}
		break
	}
	t := p.c.cfg.Topic
	p.c.xm.pending.WithLabelValues(t).Sub(float64(p.pending))
	p.c.xm.waiting.WithLabelValues(t).Sub(float64(p.waiting))
}

// fetch feeds the loop, holding at most lookAhead records and about the
// partition's share of the memory budget (plan.batchBytes) of keys and
// values fetched and not yet done; each record also holds its bytes of the
// process-wide budget until it is done (membudget.go).
func (p *xpart) fetch(ctx context.Context) {
	defer close(p.fetchDone)
	c := p.c
	bo := newBackoff(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	for {
		select {
		case p.room <- struct{}{}:
		case <-ctx.Done():
			return
		}
		for p.bytes.Load() >= p.w.mem.plan.batchBytes {
			select {
			case <-p.freed:
			case <-ctx.Done():
				return
			}
		}
		m, err := p.w.reader.FetchMessage(ctx)
		if err != nil {
			<-p.room
			if ctx.Err() != nil {
				return
			}
			c.metrics.infraErrors.WithLabelValues(compKafka).Inc()
			err = redactErr(err, c.secrets...)
			if c.health.fail(compKafka, err) {
				p.w.log.Warn("fetching from the broker failed; retrying", "err", err)
			}
			if !sleep(ctx, bo.next()) {
				return
			}
			continue
		}
		bo.reset()
		c.health.ok(compKafka)
		if err := p.w.mem.holdRecord(ctx, &m); err != nil {
			<-p.room
			return // the session ended while other partitions held the budget
		}
		p.bytes.Add(int64(len(m.Key) + len(m.Value)))
		p.fetched <- m // never blocks: room bounds it
	}
}

// loop runs the session until the generation ends or an error stops it.
func (p *xpart) loop() error {
	w := p.w
	idle := time.NewTimer(positionCheckInterval)
	defer idle.Stop()
	flushT := time.NewTimer(time.Hour)
	flushT.Stop()
	defer flushT.Stop()
	armed := false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case m := <-p.fetched:
			batch := []kafka.Message{m}
			for len(batch) < 1000 {
				select {
				case m := <-p.fetched:
					batch = append(batch, m)
					continue
				default:
				}
				break
			}
			if err := p.accept(batch); err != nil {
				return err
			}
			idle.Reset(positionCheckInterval)
		case res := <-p.results:
			p.finished(res)
		case <-flushT.C:
			armed = false
			if err := p.flush(); err != nil {
				return err
			}
		case <-idle.C:
			if len(p.window) == 0 && !w.idleCheck() {
				return errAbandoned
			}
			idle.Reset(positionCheckInterval)
		case <-tick.C:
		case <-w.genCtx.Done():
			return errGenEnded
		}
		p.gauges()
		if p.stopErr != nil && p.running == 0 {
			return p.stopErr
		}
		pending, prefix := p.flushable()
		switch {
		case pending == 0 && prefix == 0:
		case pending >= p.lookAhead/2 || prefix >= p.lookAhead/2 || (prefix > 0 && len(p.window) >= p.lookAhead):
			if err := p.flush(); err != nil {
				return err
			}
		case !armed:
			flushT.Reset(p.c.cfg.BatchWait)
			armed = true
		}
	}
}

// flushable counts what a flush would do: records to record or dead-letter
// (pending), and the done records at the head of the window it would remove
// (prefix). A full window whose head is unfinished is not flushed at once:
// that frees no room, and flushing on each finished call behind it would
// run one transaction per call.
func (p *xpart) flushable() (pending, prefix int) {
	head := true
	for _, r := range p.window {
		final := r.status == xSucceeded || r.status == xFailed || r.status == xDone
		if head && final {
			prefix++
		} else {
			head = false
		}
		if r.status == xSucceeded || r.status == xFailed {
			pending++
		}
	}
	return pending, prefix
}

func (p *xpart) gauges() {
	c := p.c
	t := c.cfg.Topic
	if d := len(p.window) - p.pending; d != 0 {
		c.xm.pending.WithLabelValues(t).Add(float64(d))
		p.pending = len(p.window)
	}
	if d := p.lanes.waiting - p.waiting; d != 0 {
		c.xm.waiting.WithLabelValues(t).Add(float64(d))
		p.waiting = p.lanes.waiting
	}
	age := 0.0
	if len(p.window) > 0 {
		age = time.Since(p.window[0].fetched).Seconds()
	}
	c.xm.oldest.WithLabelValues(t, partLabel(p.w.partition)).Set(age)
}

// accept decodes fetched records, looks their ids up and starts the ready
// ones.
func (p *xpart) accept(batch []kafka.Message) error {
	defer p.traceAccept(batch)()
	c := p.c
	now := time.Now()
	var recs []*xrec
	var ids []uuid.UUID
	for _, m := range batch {
		r := &xrec{fetched: now, size: int64(len(m.Key) + len(m.Value))}
		p.w.decode(&r.item, m)
		p.window = append(p.window, r)
		if r.state == stRejected {
			p.reject(r)
			continue
		}
		r.ev.Deduplicated = true
		// Registered before the lookup: see claims.
		r.claim, r.owner = c.claims.register(r.ev.ID, r)
		recs = append(recs, r)
		ids = append(ids, r.ev.ID)
	}
	recorded, outside, err := p.lookup(ids)
	if err != nil {
		return err
	}
	for i, r := range recs {
		switch {
		case outside[i]:
			if r.owner {
				c.claims.release(r.ev.ID, r.claim)
			}
			r.claim = nil
			w := c.inserter.Window()
			r.reason = ReasonOutsideWindow
			r.errText = fmt.Sprintf("event id %s (time %s) is outside the dedup window [%s, %s)",
				r.ev.ID, envelope.Time(r.ev.ID).Format(time.RFC3339), w.From.Format(time.RFC3339), w.To.Format(time.RFC3339))
			r.policy = c.cfg.Policies[ReasonOutsideWindow]
			if r.policy == PolicyProcess {
				r.ev.Deduplicated = false
				p.ready(r)
				continue
			}
			r.state = stRejected
			p.reject(r)
		case recorded[i]:
			if r.owner {
				c.claims.resolve(r.ev.ID, r.claim, true)
			}
			r.state, r.status = stDuplicate, xDone
		default:
			p.ready(r)
		}
	}
	return nil
}

// reject applies a rejected record's policy.
func (p *xpart) reject(r *xrec) {
	switch r.policy {
	case PolicyStop:
		r.status = xStuck
		if p.stopErr == nil {
			p.stopErr = p.w.stopError(&r.item)
			p.draining = true
		}
	case PolicySkip:
		r.status = xDone
	default:
		r.status = xFailed
	}
}

// lookup returns which ids are recorded and which are outside the window,
// retrying while the database is unreachable.
func (p *xpart) lookup(ids []uuid.UUID) (recorded, outside []bool, err error) {
	w, c := p.w, p.c
	bo := newBackoff(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	for {
		ctx, cancel := context.WithTimeout(w.genCtx, 30*time.Second)
		recorded, outside, err = c.inserter.Recorded(ctx, c.pool, ids)
		cancel()
		if err == nil {
			if d := c.health.ok(compDatabase); d > 0 {
				w.log.Info("database reachable again", "outage", d.Round(time.Millisecond))
			}
			return recorded, outside, nil
		}
		if w.genCtx.Err() != nil {
			return nil, nil, errGenEnded
		}
		c.metrics.infraErrors.WithLabelValues(compDatabase).Inc()
		if err = redactErr(err, c.secrets...); c.health.fail(compDatabase, err) {
			w.log.Warn("looking up event ids failed; pausing and retrying", "err", err)
		}
		if !w.pause(bo.next()) {
			return nil, nil, errGenEnded
		}
	}
}

// ready queues r in its lane, or starts it.
func (p *xpart) ready(r *xrec) {
	if p.draining {
		r.status = xStuck
		return
	}
	if p.lanes.add(r) {
		p.start(r)
	} else {
		r.status = xQueued
	}
}

func (p *xpart) start(r *xrec) {
	r.status = xRunning
	p.running++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		out := p.runRecord(r)
		p.results <- xresult{r, out} // never blocks: one per record in the window
	}()
}

// runRecord waits for the owner of r's id when r follows one, then calls.
func (p *xpart) runRecord(r *xrec) callOutcome {
	ctx := p.callCtx
	if r.claim != nil && !r.owner {
		select {
		case <-r.claim.done:
		case <-ctx.Done():
			return outAbandoned
		}
		if r.claim.succeeded {
			return outDuplicate
		}
	}
	out := p.callExternal(ctx, r)
	if r.claim != nil && r.owner {
		p.c.claims.resolve(r.ev.ID, r.claim, out == outSucceeded)
	}
	return out
}

// finished takes a record's outcome and starts the next of its lane.
func (p *xpart) finished(res xresult) {
	r := res.r
	p.running--
	switch res.out {
	case outSucceeded:
		r.state = stHandled
		r.status = xSucceeded
		if !r.ev.Deduplicated {
			r.status = xDone // PolicyProcess: nothing to record
		}
	case outDuplicate:
		r.state, r.status = stDuplicate, xDone
	case outFailed:
		r.reason, r.state = ReasonHandlerFailed, stRejected
		r.policy = p.c.cfg.Policies[ReasonHandlerFailed]
		p.reject(r)
	case outAbandoned:
		r.status = xStuck
	}
	if p.draining {
		return
	}
	if next := p.lanes.done(r); next != nil {
		p.start(next)
	}
}

// waitCalls collects the outcome of every running call, starting no more.
func (p *xpart) waitCalls() {
	p.draining = true
	for p.running > 0 {
		p.finished(<-p.results)
	}
	p.wg.Wait()
}
