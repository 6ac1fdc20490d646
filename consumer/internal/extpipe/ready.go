package extpipe

import (
	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/record"
)

// ready queues r in its lane, or starts it; a copy of an id whose first
// record is in another lane waits off its lane (claims).
func (p *partSession) ready(r *entry) {
	if p.draining {
		r.status = statusStuck
		return
	}
	if r.claim != nil && !r.owner && !(r.claim.part == p && p.lanes.same(r, r.claim.owner)) {
		r.status = statusAwaitRow
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
		r.status = statusQueued
	}
}

// start runs r in its lane's turn.
func (p *partSession) start(r *entry) {
	r.status, r.inLane = statusRunning, true
	r.prio = p.lanes.behind(r)
	p.spawn(r, p.runRecord)
}

// spawn runs fn for r on a goroutine of its own and hands its outcome to
// the loop.
func (p *partSession) spawn(r *entry, fn func(*entry) callOutcome) {
	p.running++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		out := fn(r)
		p.results <- result{r, out} // never blocks: at most one per record in the window
	}()
}

// awaitFirst waits, off r's lane, until the first record of r's id settles
// it (claims).
func (p *partSession) awaitFirst(r *entry) callOutcome {
	switch p.c.Claims.follow(p.callCtx, r.claim, p) {
	case followDuplicate:
		return outDuplicate
	case followAbandoned:
		return outAbandoned
	}
	return outMustCall
}

// callOffLane calls for r, a copy that waited off its lane for a first
// record that failed or was given up (claims).
func (p *partSession) callOffLane(r *entry) callOutcome { return p.settle(r, true) }

// runRecord waits for the first record of r's id when r follows one (claims),
// then calls.
func (p *partSession) runRecord(r *entry) callOutcome { return p.settle(r, false) }

// settle calls for r once r owns its id, following the claims of its id
// until one settles it (claims); failed says r followed r.claim and found it
// failed or given up.
func (p *partSession) settle(r *entry, failed bool) callOutcome {
	ctx, cl, id := p.callCtx, p.c.Claims, r.Ev.ID
	if r.claim == nil {
		return p.callExternal(ctx, r) // not deduplicated
	}
	tookOver := false
	for {
		if failed {
			r.claim, r.owner = cl.takeOver(id, r, p, r.claim)
			tookOver = r.owner
			if !r.owner && r.claim.part != p {
				r.claim.want() // rare: no need to wait for BatchWait
			}
		}
		if r.owner {
			next := cl.begin(r.claim)
			if next == nil {
				break
			}
			r.claim, r.owner = next, false // superseded (claims)
		}
		switch cl.follow(ctx, r.claim, p) {
		case followDuplicate:
			return outDuplicate
		case followAbandoned:
			return outAbandoned
		}
		failed = true
	}
	if tookOver {
		// A copy that took the id over before may have succeeded and been
		// recorded since, its claim released.
		recorded, _, err := p.lookup([]uuid.UUID{id})
		if err != nil {
			cl.called(id, r.claim, false)
			return outAbandoned
		}
		if recorded[0] {
			cl.resolve(id, r.claim, true)
			return outDuplicate
		}
	}
	out := p.callExternal(ctx, r)
	// Followers in this partition settle on the call's outcome; others
	// wait for the dedup row (recorder.go) or the failure.
	cl.called(id, r.claim, out == outSucceeded)
	return out
}

// finished takes a record's outcome and starts the next of its lane.
func (p *partSession) finished(res result) {
	r := res.r
	p.running--
	if r.status == statusAwaitRow {
		p.awaiting--
	}
	switch res.out {
	case outSucceeded:
		r.State = record.Handled
		r.status = statusSucceeded
		if !r.Ev.Deduplicated {
			r.status = statusDone // event.PolicyProcess: nothing to record
		}
	case outDuplicate:
		r.State, r.status = record.Duplicate, statusDone
	case outFailed:
		r.Reason, r.State = event.ReasonHandlerFailed, record.Rejected
		r.Policy = p.c.Policies[event.ReasonHandlerFailed]
		p.reject(r)
	case outAbandoned:
		r.status = statusStuck
	case outMustCall:
		if p.draining {
			r.status = statusStuck
		} else {
			r.status = statusRunning
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
