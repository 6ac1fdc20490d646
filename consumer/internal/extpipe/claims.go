package extpipe

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
)

// claims keeps external handlers from calling twice for one id in one
// process, and from committing an offset past a copy of an id that is not
// recorded yet: the database lookup cannot see an id whose call is running,
// or succeeded but is not recorded yet, on another partition or under
// another key. The first record to register an id (in its partition, before
// the lookup) owns it until it leaves its partition's window; a record
// registering the id meanwhile follows it:
//
//   - in the owner's partition (and session), the follower settles on the
//     owner's call: a duplicate if it succeeded. Its offset cannot be
//     committed before the owner's, and the owner's offset only once its id
//     is recorded.
//   - in another partition, the follower waits until the owner's id is
//     recorded (its recording transaction committed) and is then a
//     duplicate; its partition's offset is held meanwhile. A partition with
//     nothing else to do asks the owners' partitions to record at once
//     rather than after BatchWait (wanted).
//
// A follower in the owner's lane (same partition, same key under Key
// ordering) waits in its lane's turn, after the owner. Any other follower
// waits off its lane: it is the owner's event, ordered with the owner, and
// does not hold up the later records of its own key.
//
// If the owner fails (dead letter) or is given up (rebalance, shutdown), its
// followers settle the id among themselves (takeOver): the first takes it
// over and becomes the owner of a new claim, which the failed one points to
// (next); every other follower then follows that claim, and so on down the
// chain, so that a copy never calls after another copy's call succeeded. A
// follower that takes the id over looks it up again before calling: a copy
// that took it over earlier may have succeeded and been recorded since, its
// claim released. A follower waiting off its lane calls off it, after later
// records of its key may have been called (a replay of the owner's event,
// with the same id).
//
// Registration happens in one total order that is consistent with each
// partition's offset order, and a record only ever waits on records
// registered before it (its owner, or records ahead of it in its lane) or on
// an owner that has begun (begin): one that calls, or took the id over, and
// waits on no record. So waits cannot form a cycle. When a follower would
// take an id over that a record registered after it owns and that has not
// begun (its owner failed and was released meanwhile), the follower takes
// the id over from it instead (supersedes it): that owner follows the
// follower's claim when its turn comes, and its own followers move on with
// it. A follower holds no MaxInFlight slot while it waits.
type claims struct {
	mu sync.Mutex
	m  map[uuid.UUID]*claim
}

type claim struct {
	owner *entry
	part  *partSession  // the owner's session
	call  chan struct{} // closed at the owner's call outcome (or at done)
	done  chan struct{} // closed when the id is recorded, or given up
	// wanted is set by a follower in another partition before it waits.
	wanted atomic.Bool
	// Under claims.mu; read by followers after call or done is closed.
	called, resolved bool
	callOK, ok       bool
	// begun: the owner calls (or took the id over) and waits on no record.
	// next: the claim that took the id over after this one failed or was
	// given up, or that superseded it.
	begun bool
	next  *claim
}

func newClaim(r *entry, p *partSession) *claim {
	return &claim{owner: r, part: p, call: make(chan struct{}), done: make(chan struct{})}
}

func newClaims() *claims { return &claims{m: map[uuid.UUID]*claim{}} }

// register makes r (of session p) the owner of id, or a follower of its
// current owner.
func (cl *claims) register(id uuid.UUID, r *entry, p *partSession) (c *claim, owner bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c, ok := cl.m[id]; ok {
		return c, false
	}
	c = newClaim(r, p)
	cl.m[id] = c
	return c, true
}

// begin marks c's owner as calling, before its call; if a follower
// superseded c meanwhile (see claims), the owner owns nothing and is to
// follow the claim it returns.
func (cl *claims) begin(c *claim) (next *claim) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c.next != nil {
		return c.next
	}
	c.begun = true
	return nil
}

// takeOver settles id for r, which followed old (of id) and found it failed
// or given up: r follows the claim that took old over, or the id's current
// claim if its owner has begun; otherwise r owns a new claim, begun, and
// must look the id up again before calling (see claims).
func (cl *claims) takeOver(id uuid.UUID, r *entry, p *partSession, old *claim) (c *claim, owner bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if old.next != nil {
		return old.next, false
	}
	cur := cl.m[id]
	if cur != nil && cur != old && (cur.begun || cur.called || cur.resolved) {
		old.next = cur
		return cur, false
	}
	c = newClaim(r, p)
	c.begun = true
	cl.m[id] = c
	old.next = c
	if cur != nil && cur != old {
		// Its owner, registered after r, has not begun: r supersedes it.
		cur.next = c
		cl.resolveLocked(id, cur, false)
	}
	return c, true
}

// called records the outcome of the owner's call. A failed call gives the id
// up.
func (cl *claims) called(id uuid.UUID, c *claim, ok bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.setCalled(c, ok)
	if !ok {
		cl.resolveLocked(id, c, false)
	}
}

func (cl *claims) setCalled(c *claim, ok bool) {
	if !c.called {
		c.called, c.callOK = true, ok
		close(c.call)
	}
}

// resolve records once whether id is recorded (ok) or given up. An id given
// up is forgotten, so that a later record of it registers afresh.
func (cl *claims) resolve(id uuid.UUID, c *claim, ok bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.resolveLocked(id, c, ok)
}

func (cl *claims) resolveLocked(id uuid.UUID, c *claim, ok bool) {
	if c.resolved {
		return
	}
	cl.setCalled(c, ok)
	c.resolved, c.ok = true, ok
	close(c.done)
	if !ok && cl.m[id] == c {
		delete(cl.m, id)
	}
}

// release ends the owner's claim when it leaves its partition's window
// (recorded, dead-lettered, or its session ended); an unresolved claim is
// given up, so followers call for themselves.
func (cl *claims) release(id uuid.UUID, c *claim) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.resolveLocked(id, c, false)
	if cl.m[id] == c {
		delete(cl.m, id)
	}
}

type followResult uint8

const (
	followDuplicate followResult = iota // the owner's id is settled: a duplicate
	followCall                          // the owner failed or was given up: call
	followAbandoned                     // ctx ended first
)

// follow waits, for a follower in session p, until the owner settles the id
// (see claims): its call's outcome in p, its row elsewhere.
func (cl *claims) follow(ctx context.Context, c *claim, p *partSession) followResult {
	wait := c.done
	if c.part == p {
		wait = c.call
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return followAbandoned
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if (c.part == p && c.callOK) || (c.resolved && c.ok) {
		return followDuplicate
	}
	return followCall
}

// want asks the owner's partition to record c's id at once.
func (c *claim) want() {
	c.wanted.Store(true)
	select {
	case c.part.urge <- struct{}{}:
	default:
	}
}
