package extpipe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
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

type status uint8

const (
	statusNew       status = iota // fetched, not yet looked up (or its lookup is running)
	statusQueued                  // ready, waiting behind an earlier record of its lane
	statusRunning                 // its handler calls are running (or it waits for its id's first record)
	statusSucceeded               // the handler succeeded; the id is to be recorded
	statusFailed                  // a dead letter is to be written
	statusAwaitRow                // a copy waiting off its lane for its id's first record (claims)
	statusRecording               // in the running recording job (was statusSucceeded or statusFailed)
	statusDone                    // durably done: recorded, duplicate, skipped or dead-lettered
	statusStuck                   // never done in this session (event.PolicyStop, abandoned)
)

// entry is one record of a partition's window.
type entry struct {
	record.Item
	status  status
	claim   *claim // nil when the id is not deduplicated
	owner   bool
	fetched time.Time
	size    int64
	prio    int  // records of its lane queued behind it when it started (slots)
	inLane  bool // it holds its lane's turn
	poked   bool // its claim's owner was asked to record at once
	lent    bool // gave its look-ahead room back while it waits off its lane
}

type result struct {
	r   *entry
	out callOutcome
}

// lookResult is a lookup job's answer for recs.
type lookResult struct {
	recs              []*entry
	recorded, outside []bool
	err               error
}

// errGenEnded ends a session's loop when the generation ends.
var errGenEnded = errors.New("generation ended")

// partSession is one session of a partition under an external handler: from the
// assignment (or a rewind) until the generation ends.
type partSession struct {
	w         *partition.Worker
	c         *env
	lookAhead int
	lanes     *lanes
	window    []*entry // offset order
	fetched   chan kafka.Message
	results   chan result
	room      chan struct{} // one token per record fetched and not removed
	bytes     atomic.Int64  // key and value bytes of those records
	freed     chan struct{} // signals the fetcher that bytes were freed
	running   int           // goroutines of records whose result is not taken yet
	awaiting  int           // of which records in statusAwaitRow
	lent      int           // records in the window that gave their room back (at most lookAhead)
	draining  bool          // start no more calls
	ending    bool          // the generation ended: record what finishes, then stop
	stopErr   error         // event.PolicyStop: returned once everything else is durable
	committed int64         // touched only by the recording job (one at a time)

	// Lookups: records accepted and not looked up yet, and the job.
	unlooked []*entry
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

// runSession runs one session of the partition: from the assignment (or a
// rewind) until the generation ends; a *partition.RewindError asks Run to
// rewind and start another.
func runSession(w *partition.Worker, c *env) *partition.RewindError {
	n := max(c.MaxInFlight*maxLookAheadFactor, 16)
	t := c.Topic
	p := &partSession{w: w, c: c, lookAhead: n, lanes: newLanes(c.Ordering), committed: -1,
		fetched: make(chan kafka.Message, n), results: make(chan result, n), room: make(chan struct{}, n),
		freed: make(chan struct{}, 1), fetchDone: make(chan struct{}),
		lookRes: make(chan lookResult, 1), recRes: make(chan *recJob, 1), urge: make(chan struct{}, 1),
		gPending: c.XM.Pending.WithLabelValues(t), gWaiting: c.XM.Waiting.WithLabelValues(t),
		gOldest: c.XM.Oldest.WithLabelValues(t, telemetry.PartLabel(w.Partition))}
	// Calls outlive the generation only at shutdown, for its grace period;
	// a revoked partition's calls end at once (cancelCalls below).
	p.callCtx, p.cancelCalls = context.WithCancel(w.HardCtx)
	defer p.cancelCalls()
	p.lookCtx, p.stopLook = context.WithCancel(w.GenCtx)
	defer p.stopLook()
	fctx, stopFetch := context.WithCancel(w.GenCtx)
	p.stopFetch = stopFetch
	go p.fetch(fctx)
	defer p.close()

	err := p.loop()
	var rw *partition.RewindError
	switch {
	case err == nil || errors.Is(err, event.ErrStopped):
		// The generation ended (or event.PolicyStop): what finished is recorded.
		if err != nil {
			w.Fatal(err)
		}
		return nil
	case errors.As(err, &rw):
		p.abort()
		return rw
	case errors.Is(err, partition.ErrAbandoned):
		p.abort()
		return nil
	default: // a crash (test hook) or a fatal error: nothing more is committed
		p.abort()
		w.Fatal(err)
		return nil
	}
}

// abort ends the session without recording anything more: the calls are
// cancelled and every goroutine of the session is waited for.
func (p *partSession) abort() {
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
func (p *partSession) close() {
	p.stopFetch()
	<-p.fetchDone
	for _, r := range p.window {
		if r.claim != nil && r.owner {
			p.c.Claims.release(r.Ev.ID, r.claim)
		}
		p.w.Mem.ReleaseRecord(&r.Msg)
	}
	for {
		select {
		case m := <-p.fetched:
			p.w.Mem.ReleaseRecord(&m)
			continue
		default:
		}
		break
	}
	t := p.c.Topic
	p.c.XM.Pending.WithLabelValues(t).Sub(float64(p.pending))
	p.c.XM.Waiting.WithLabelValues(t).Sub(float64(p.waiting))
}

// fetch feeds the loop, holding at most lookAhead records and about the
// partition's share of the memory budget (plan.batchBytes) of keys and
// values fetched and not yet done; each record also holds its bytes of the
// process-wide budget until it is done (membudget.Partition.Hold).
func (p *partSession) fetch(ctx context.Context) {
	defer close(p.fetchDone)
	c := p.c
	bo := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	for {
		select {
		case p.room <- struct{}{}:
		case <-ctx.Done():
			return
		}
		for p.bytes.Load() >= p.w.Mem.Plan.BatchBytes {
			select {
			case <-p.freed:
			case <-ctx.Done():
				return
			}
		}
		m, err := p.w.Reader.FetchMessage(ctx)
		if err != nil {
			<-p.room
			if ctx.Err() != nil {
				return
			}
			c.Metrics.InfraErrors.WithLabelValues(telemetry.CompKafka).Inc()
			err = redact.Err(err, c.Secrets...)
			if c.Health.Fail(telemetry.CompKafka, err) {
				p.w.Log.Warn("fetching from the broker failed; retrying", "err", err)
			}
			if !backoff.Sleep(ctx, bo.Next()) {
				return
			}
			continue
		}
		bo.Reset()
		c.Health.OK(telemetry.CompKafka)
		if err := p.w.Mem.Hold(ctx, &m); err != nil {
			<-p.room
			return // the session ended while other partitions held the budget
		}
		p.bytes.Add(int64(len(m.Key) + len(m.Value)))
		p.fetched <- m // never blocks: room bounds it
	}
}

// loop runs the session until the generation ends (nil, once what finished
// is recorded), event.PolicyStop (its event.ErrStopped error, likewise) or an error that
// stops it at once (a *partition.RewindError, partition.ErrAbandoned, a fatal error).
func (p *partSession) loop() error {
	w := p.w
	idle := time.NewTimer(partition.PositionCheckInterval)
	defer idle.Stop()
	flushT := time.NewTimer(time.Hour)
	flushT.Stop()
	defer flushT.Stop()
	armed := false
	var armedFor time.Time
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	genDone := w.GenCtx.Done()
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
			idle.Reset(partition.PositionCheckInterval)
		case lr := <-p.lookRes:
			p.lookBusy = false
			if lr.err != nil {
				if !errors.Is(lr.err, errGenEnded) {
					return lr.err
				}
				p.end()
				genDone = nil
				for _, r := range lr.recs {
					r.status = statusStuck
				}
			} else {
				p.looked(lr)
			}
		case res := <-p.results:
			p.finished(res)
		case job := <-p.recRes:
			p.recBusy = false
			if err := p.recorded(job); err != nil {
				var rw *partition.RewindError
				if p.ending && (errors.Is(err, partition.ErrAbandoned) || errors.As(err, &rw)) {
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
			if len(p.window) == 0 && !p.recBusy && !w.IdleCheck() {
				return partition.ErrAbandoned
			}
			idle.Reset(partition.PositionCheckInterval)
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
		soon := p.lastJob.Add(p.c.BatchWait / 4)
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
			flushT.Reset(p.c.BatchWait)
			armed, armedFor = true, time.Now().Add(p.c.BatchWait)
		}
	}
}

// quiet reports whether nothing of the partition runs or waits to, but
// records awaiting another partition's row.
func (p *partSession) quiet() bool {
	return p.running == p.awaiting && p.lanes.waiting == 0 && !p.lookBusy && len(p.unlooked) == 0
}

// full reports whether the window holds its look-ahead: the fetcher waits.
func (p *partSession) full() bool { return len(p.window)-p.lent >= p.lookAhead }

// askOwners asks the owners of the ids that records in statusAwaitRow wait for to
// record at once, when those records are all that holds the partition: it
// is quiet, or its window is full.
func (p *partSession) askOwners() {
	if p.awaiting == 0 || !(p.quiet() || p.full()) {
		return
	}
	for _, r := range p.window {
		if r.status == statusAwaitRow && !r.poked {
			r.poked = true
			r.claim.want()
		}
	}
}

// end starts the end of the session when the generation ends: no more
// records are taken; at shutdown the running calls go on for the grace
// period, after a rebalance they are cancelled (the next owner calls again
// with the same ids); what finishes is recorded.
func (p *partSession) end() {
	p.ending, p.draining = true, true
	if p.w.RunCtx.Err() == nil {
		p.cancelCalls()
	}
	p.stopLook()
}

// finish returns the loop's result once nothing runs: the event.PolicyStop error,
// or nil.
func (p *partSession) finish() error {
	p.draining = true
	p.cancelCalls()
	p.abort() // nothing runs: waits for nothing, unless a job failed at the end
	return p.stopErr
}

// flushable counts what a recording job would do: records to record or
// dead-letter (pending), and the done records at the head of the window it
// would remove (prefix); urgent when a record of another partition waits
// for one of the pending ids.
func (p *partSession) flushable() (pending, prefix int, urgent bool) {
	head := true
	for _, r := range p.window {
		s := r.status
		if head && (s == statusSucceeded || s == statusFailed || s == statusDone) {
			prefix++
		} else {
			head = false
		}
		if s == statusSucceeded || s == statusFailed {
			pending++
			if r.claim != nil && r.owner && r.claim.wanted.Load() {
				urgent = true
			}
		}
	}
	return pending, prefix, urgent
}

func (p *partSession) gauges() {
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

// traceAccept starts the span of a batch the external protocol accepts;
// the returned func ends it with the records accept added to the window.
// The handler calls run after it ended, as children of it or of their
// records' traceparents.
func (p *partSession) traceAccept(batch []kafka.Message) func() {
	bs := p.w.StartBatchSpan(batch)
	if !bs.On() {
		return noAccept
	}
	from := len(p.window)
	return func() {
		recs := p.window[from:]
		items := make([]*record.Item, len(recs))
		for i, r := range recs {
			items[i] = &r.Item
		}
		bs.End(items, nil, p.c.Secrets)
	}
}

func noAccept() {}
