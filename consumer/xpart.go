package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
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
//
// One goroutine, the session's loop, owns the window and starts everything;
// the lookups and the recording jobs (recorder.go) run on goroutines of their
// own, at most one of each at a time per partition, so that calls keep being
// issued while the database or the broker answers. Whatever finishes while a
// lookup or a recording runs is taken by the next one, in one statement or
// one transaction.

type xstatus uint8

const (
	xNew       xstatus = iota // fetched, not yet looked up (or its lookup is running)
	xQueued                   // ready, waiting behind an earlier record of its lane
	xRunning                  // its handler calls are running (or it waits for its id's first record)
	xSucceeded                // the handler succeeded; the id is to be recorded
	xFailed                   // a dead letter is to be written
	xAwaitRow                 // a copy waiting off its lane for its id's first record (claims)
	xRecording                // in the running recording job (was xSucceeded or xFailed)
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
	prio    int  // records of its lane queued behind it when it started (slots)
	inLane  bool // it holds its lane's turn
	poked   bool // its claim's owner was asked to record at once
	lent    bool // gave its look-ahead room back while it waits off its lane
}

type xresult struct {
	r   *xrec
	out callOutcome
}

// lookResult is a lookup job's answer for recs.
type lookResult struct {
	recs              []*xrec
	recorded, outside []bool
	err               error
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
	running   int           // goroutines of records whose result is not taken yet
	awaiting  int           // of which records in xAwaitRow
	lent      int           // records in the window that gave their room back (at most lookAhead)
	draining  bool          // start no more calls
	ending    bool          // the generation ended: record what finishes, then stop
	stopErr   error         // PolicyStop: returned once everything else is durable
	committed int64         // touched only by the recording job (one at a time)

	// Lookups: records accepted and not looked up yet, and the job.
	unlooked []*xrec
	lookBusy bool
	lookRes  chan lookResult
	lookCtx  context.Context
	stopLook context.CancelFunc

	// Recording (recorder.go): the running job, and whether a flush is due.
	recBusy bool
	recRes  chan *recJob
	due     bool          // BatchWait passed since something became flushable
	lastJob time.Time     // when the last recording job started
	urge    chan struct{} // a record of another partition waits for one of ours

	pending                     int // this partition's share of the records_in_flight gauge
	waiting                     int // and of records_waiting_for_key
	gPending, gWaiting, gOldest prometheus.Gauge

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
	t := c.cfg.Topic
	p := &xpart{w: w, c: c, lookAhead: n, lanes: newLanes(c.cfg.Ordering), committed: -1,
		fetched: make(chan kafka.Message, n), results: make(chan xresult, n), room: make(chan struct{}, n),
		freed: make(chan struct{}, 1), fetchDone: make(chan struct{}),
		lookRes: make(chan lookResult, 1), recRes: make(chan *recJob, 1), urge: make(chan struct{}, 1),
		gPending: c.xm.pending.WithLabelValues(t), gWaiting: c.xm.waiting.WithLabelValues(t),
		gOldest: c.xm.oldest.WithLabelValues(t, partLabel(w.partition))}
	// Calls outlive the generation only at shutdown, for its grace period;
	// a revoked partition's calls end at once (cancelCalls below).
	p.callCtx, p.cancelCalls = context.WithCancel(w.hardCtx)
	defer p.cancelCalls()
	p.lookCtx, p.stopLook = context.WithCancel(w.genCtx)
	defer p.stopLook()
	fctx, stopFetch := context.WithCancel(w.genCtx)
	p.stopFetch = stopFetch
	go p.fetch(fctx)
	defer p.close()

	err := p.loop()
	var rw *rewindError
	switch {
	case err == nil || errors.Is(err, ErrStopped):
		// The generation ended (or PolicyStop): what finished is recorded.
		if err != nil {
			w.fatal(err)
		}
		return nil
	case errors.As(err, &rw):
		p.abort()
		return rw
	case errors.Is(err, errAbandoned):
		p.abort()
		return nil
	default: // a crash (test hook) or a fatal error: nothing more is committed
		p.abort()
		w.fatal(err)
		return nil
	}
}

// abort ends the session without recording anything more: the calls are
// cancelled and every goroutine of the session is waited for.
func (p *xpart) abort() {
	p.cancelCalls()
	p.stopLook()
	p.draining = true
	for p.running > 0 || p.lookBusy || p.recBusy {
		select {
		case res := <-p.results:
			p.finished(res)
		case <-p.lookRes:
			p.lookBusy = false
		case <-p.recRes:
			p.recBusy = false
		}
	}
	p.wg.Wait()
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

// loop runs the session until the generation ends (nil, once what finished
// is recorded), PolicyStop (its ErrStopped error, likewise) or an error that
// stops it at once (a *rewindError, errAbandoned, a fatal error).
func (p *xpart) loop() error {
	w := p.w
	idle := time.NewTimer(positionCheckInterval)
	defer idle.Stop()
	flushT := time.NewTimer(time.Hour)
	flushT.Stop()
	defer flushT.Stop()
	armed := false
	var armedFor time.Time
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	genDone := w.genCtx.Done()
	fetched := p.fetched
	for {
		select {
		case m := <-fetched:
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
			p.accept(batch)
			idle.Reset(positionCheckInterval)
		case lr := <-p.lookRes:
			p.lookBusy = false
			if lr.err != nil {
				if !errors.Is(lr.err, errGenEnded) {
					return lr.err
				}
				p.end()
				genDone = nil
				for _, r := range lr.recs {
					r.status = xStuck
				}
			} else {
				p.looked(lr)
			}
		case res := <-p.results:
			p.finished(res)
		case job := <-p.recRes:
			p.recBusy = false
			if err := p.recorded(job); err != nil {
				var rw *rewindError
				if p.ending && (errors.Is(err, errAbandoned) || errors.As(err, &rw)) {
					// The generation ended while recording: the next owner
					// redoes what is not recorded.
					return p.finish()
				}
				return err
			}
		case <-p.urge:
		case <-flushT.C:
			armed = false
			p.due = true
		case <-idle.C:
			if len(p.window) == 0 && !p.recBusy && !w.idleCheck() {
				return errAbandoned
			}
			idle.Reset(positionCheckInterval)
		case <-tick.C:
		case <-genDone:
			genDone = nil
			p.end()
		}
		if p.draining {
			fetched = nil
		}
		p.gauges()
		if !p.lookBusy && len(p.unlooked) > 0 && !p.draining {
			p.startLookup()
		}
		if p.recBusy {
			continue
		}
		p.askOwners()
		pending, prefix, urgent := p.flushable()
		if pending == 0 && prefix == 0 {
			p.due = false
			if p.draining && p.running == 0 && !p.lookBusy {
				return p.finish()
			}
			continue
		}
		// Recorded at once: at the end, when nothing else is running or
		// queued here (the last of a burst), and when it frees half the
		// look-ahead; when a record elsewhere waits for one of ours, a
		// quarter of BatchWait after the last recording at the soonest
		// (the copies waiting hold only their offsets, and a partition
		// with copies of many others' records would otherwise have them
		// record one id at a time); else after BatchWait, so that one
		// transaction takes many ids.
		soon := p.lastJob.Add(p.c.cfg.BatchWait / 4)
		if p.draining || p.quiet() || p.due || pending >= p.lookAhead/2 || prefix >= p.lookAhead/2 ||
			(prefix > 0 && p.full()) || (urgent && !time.Now().Before(soon)) {
			p.due = false
			if armed {
				flushT.Stop()
				armed = false
			}
			p.lastJob = time.Now()
			if err := p.startRecording(); err != nil {
				return err
			}
		} else if urgent && (!armed || soon.Before(armedFor)) {
			flushT.Reset(time.Until(soon))
			armed, armedFor = true, soon
		} else if !armed {
			flushT.Reset(p.c.cfg.BatchWait)
			armed, armedFor = true, time.Now().Add(p.c.cfg.BatchWait)
		}
	}
}

// quiet reports whether nothing of the partition runs or waits to, but
// records awaiting another partition's row.
func (p *xpart) quiet() bool {
	return p.running == p.awaiting && p.lanes.waiting == 0 && !p.lookBusy && len(p.unlooked) == 0
}

// full reports whether the window holds its look-ahead: the fetcher waits.
func (p *xpart) full() bool { return len(p.window)-p.lent >= p.lookAhead }

// askOwners asks the owners of the ids that records in xAwaitRow wait for to
// record at once, when those records are all that holds the partition: it
// is quiet, or its window is full.
func (p *xpart) askOwners() {
	if p.awaiting == 0 || !(p.quiet() || p.full()) {
		return
	}
	for _, r := range p.window {
		if r.status == xAwaitRow && !r.poked {
			r.poked = true
			r.claim.want()
		}
	}
}

// end starts the end of the session when the generation ends: no more
// records are taken; at shutdown the running calls go on for the grace
// period, after a rebalance they are cancelled (the next owner calls again
// with the same ids); what finishes is recorded.
func (p *xpart) end() {
	p.ending, p.draining = true, true
	if p.w.runCtx.Err() == nil {
		p.cancelCalls()
	}
	p.stopLook()
}

// finish returns the loop's result once nothing runs: the PolicyStop error,
// or nil.
func (p *xpart) finish() error {
	p.draining = true
	p.cancelCalls()
	p.abort() // nothing runs: waits for nothing, unless a job failed at the end
	return p.stopErr
}

// flushable counts what a recording job would do: records to record or
// dead-letter (pending), and the done records at the head of the window it
// would remove (prefix); urgent when a record of another partition waits
// for one of the pending ids.
func (p *xpart) flushable() (pending, prefix int, urgent bool) {
	head := true
	for _, r := range p.window {
		s := r.status
		if head && (s == xSucceeded || s == xFailed || s == xDone) {
			prefix++
		} else {
			head = false
		}
		if s == xSucceeded || s == xFailed {
			pending++
			if r.claim != nil && r.owner && r.claim.wanted.Load() {
				urgent = true
			}
		}
	}
	return pending, prefix, urgent
}

func (p *xpart) gauges() {
	if d := len(p.window) - p.pending; d != 0 {
		p.gPending.Add(float64(d))
		p.pending = len(p.window)
	}
	if d := p.lanes.waiting - p.waiting; d != 0 {
		p.gWaiting.Add(float64(d))
		p.waiting = p.lanes.waiting
	}
	age := 0.0
	if len(p.window) > 0 {
		age = time.Since(p.window[0].fetched).Seconds()
	}
	p.gOldest.Set(age)
}

// accept decodes fetched records into the window and queues them for the
// lookup.
func (p *xpart) accept(batch []kafka.Message) {
	defer p.traceAccept(batch)()
	c := p.c
	now := time.Now()
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
		r.claim, r.owner = c.claims.register(r.ev.ID, r, p)
		p.unlooked = append(p.unlooked, r)
	}
}

// startLookup looks the unlooked records' ids up on a goroutine of its own.
func (p *xpart) startLookup() {
	recs := p.unlooked
	p.unlooked = nil
	ids := make([]uuid.UUID, len(recs))
	for i, r := range recs {
		ids[i] = r.ev.ID
	}
	p.lookBusy = true
	go func() {
		recorded, outside, err := p.lookup(ids)
		p.lookRes <- lookResult{recs: recs, recorded: recorded, outside: outside, err: err}
	}()
}

// looked applies a lookup's answer, in offset order, and starts the ready
// records.
func (p *xpart) looked(lr lookResult) {
	c := p.c
	for i, r := range lr.recs {
		switch {
		case lr.outside[i]:
			if r.owner {
				c.claims.release(r.ev.ID, r.claim)
			}
			r.claim, r.owner = nil, false
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
		case lr.recorded[i]:
			if r.owner {
				c.claims.resolve(r.ev.ID, r.claim, true)
			}
			r.state, r.status = stDuplicate, xDone
		default:
			p.ready(r)
		}
	}
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
// retrying while the database is unreachable. It runs on its own goroutine
// (startLookup): it touches no session state.
func (p *xpart) lookup(ids []uuid.UUID) (recorded, outside []bool, err error) {
	w, c := p.w, p.c
	bo := newBackoff(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	for {
		ctx, cancel := context.WithTimeout(p.lookCtx, 30*time.Second)
		recorded, outside, err = c.inserter.Recorded(ctx, c.pool, ids)
		cancel()
		if err == nil {
			if d := c.health.ok(compDatabase); d > 0 {
				w.log.Info("database reachable again", "outage", d.Round(time.Millisecond))
			}
			return recorded, outside, nil
		}
		if p.lookCtx.Err() != nil {
			return nil, nil, errGenEnded
		}
		c.metrics.infraErrors.WithLabelValues(compDatabase).Inc()
		if err = redactErr(err, c.secrets...); c.health.fail(compDatabase, err) {
			w.log.Warn("looking up event ids failed; pausing and retrying", "err", err)
		}
		if !sleep(p.lookCtx, bo.next()) {
			return nil, nil, errGenEnded
		}
	}
}

// ready queues r in its lane, or starts it; a copy of an id whose first
// record is in another lane waits off its lane (claims).
func (p *xpart) ready(r *xrec) {
	if p.draining {
		r.status = xStuck
		return
	}
	if r.claim != nil && !r.owner && !(r.claim.part == p && p.lanes.same(r, r.claim.owner)) {
		r.status = xAwaitRow
		p.awaiting++
		if p.lent < p.lookAhead {
			// A copy waiting for another partition's record (deep in a
			// long lane there, maybe) holds the offset, but not the
			// look-ahead: the window may grow to twice it meanwhile.
			<-p.room
			r.lent = true
			p.lent++
		}
		p.spawn(r, p.awaitFirst)
		return
	}
	if p.lanes.add(r) {
		p.start(r)
	} else {
		r.status = xQueued
	}
}

// start runs r in its lane's turn.
func (p *xpart) start(r *xrec) {
	r.status, r.inLane = xRunning, true
	r.prio = p.lanes.behind(r)
	p.spawn(r, p.runRecord)
}

// spawn runs fn for r on a goroutine of its own and hands its outcome to
// the loop.
func (p *xpart) spawn(r *xrec, fn func(*xrec) callOutcome) {
	p.running++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		out := fn(r)
		p.results <- xresult{r, out} // never blocks: at most one per record in the window
	}()
}

// awaitFirst waits, off r's lane, until the first record of r's id settles
// it (claims).
func (p *xpart) awaitFirst(r *xrec) callOutcome {
	switch p.c.claims.follow(p.callCtx, r.claim, p) {
	case followDuplicate:
		return outDuplicate
	case followAbandoned:
		return outAbandoned
	}
	return outMustCall
}

// callOffLane calls for r, a copy that waited off its lane for a first
// record that failed or was given up (claims).
func (p *xpart) callOffLane(r *xrec) callOutcome {
	r.claim = p.c.claims.takeOver(r.ev.ID, r, p)
	r.owner = r.claim != nil
	out := p.callExternal(p.callCtx, r)
	if r.claim != nil {
		p.c.claims.called(r.ev.ID, r.claim, out == outSucceeded)
	}
	return out
}

// runRecord waits for the first record of r's id when r follows one (claims),
// then calls.
func (p *xpart) runRecord(r *xrec) callOutcome {
	ctx := p.callCtx
	if r.claim != nil && !r.owner {
		switch p.c.claims.follow(ctx, r.claim, p) {
		case followDuplicate:
			return outDuplicate
		case followAbandoned:
			return outAbandoned
		}
		// The first record failed or was given up: r calls, owning the id
		// unless yet another record registered it meanwhile.
		r.claim = p.c.claims.takeOver(r.ev.ID, r, p)
		r.owner = r.claim != nil
	}
	out := p.callExternal(ctx, r)
	if r.claim != nil {
		// Followers in this partition settle on the call's outcome; others
		// wait for the dedup row (recorder.go) or the failure.
		p.c.claims.called(r.ev.ID, r.claim, out == outSucceeded)
	}
	return out
}

// finished takes a record's outcome and starts the next of its lane.
func (p *xpart) finished(res xresult) {
	r := res.r
	p.running--
	if r.status == xAwaitRow {
		p.awaiting--
	}
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
	case outMustCall:
		if p.draining {
			r.status = xStuck
		} else {
			r.status = xRunning
			p.spawn(r, p.callOffLane)
		}
	}
	if !r.inLane || p.draining {
		return
	}
	r.inLane = false
	if next := p.lanes.done(r); next != nil {
		p.start(next)
	}
}
