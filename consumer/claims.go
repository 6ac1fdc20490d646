package consumer

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
// If the owner fails (dead letter) or is given up (rebalance, shutdown), the
// follower calls the handler itself, taking the id over if no other record
// has registered it since; a follower waiting off its lane then calls off
// it, after later records of its key may have been called (a replay of the
// owner's event, with the same id).
//
// Registration happens in one total order that is consistent with each
// partition's offset order, and a record only ever waits on records
// registered before it (its owner, or records ahead of it in its lane), so
// waits cannot form a cycle; a follower that takes an id over after its
// owner failed waits on nobody new. A follower holds no MaxInFlight slot
// while it waits.
type claims struct {
	mu sync.Mutex
	m  map[uuid.UUID]*claim
}

type claim struct {
	owner *xrec
	part  *xpart        // the owner's session
	call  chan struct{} // closed at the owner's call outcome (or at done)
	done  chan struct{} // closed when the id is recorded, or given up
	// wanted is set by a follower in another partition before it waits.
	wanted atomic.Bool
	// Under claims.mu; read by followers after call or done is closed.
	called, resolved bool
	callOK, ok       bool
}

func newClaims() *claims { return &claims{m: map[uuid.UUID]*claim{}} }

// register makes r (of session p) the owner of id, or a follower of its
// current owner.
func (cl *claims) register(id uuid.UUID, r *xrec, p *xpart) (c *claim, owner bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c, ok := cl.m[id]; ok {
		return c, false
	}
	c = &claim{owner: r, part: p, call: make(chan struct{}), done: make(chan struct{})}
	cl.m[id] = c
	return c, true
}

// takeOver makes r the owner of id after the owner it followed failed, if no
// other record registered id since; otherwise r owns nothing (nil) and calls
// without waiting on anyone new.
func (cl *claims) takeOver(id uuid.UUID, r *xrec, p *xpart) *claim {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if _, ok := cl.m[id]; ok {
		return nil
	}
	c := &claim{owner: r, part: p, call: make(chan struct{}), done: make(chan struct{})}
	cl.m[id] = c
	return c
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
func (cl *claims) follow(ctx context.Context, c *claim, p *xpart) followResult {
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
