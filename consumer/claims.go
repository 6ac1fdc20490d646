package consumer

import (
	"sync"

	"github.com/google/uuid"
)

// claims keeps external handlers from calling twice for one id in one
// process: the database lookup cannot see an id whose call is running, or
// succeeded but is not recorded yet, on another partition or under another
// key. The first record to register an id (in its partition's lookup, before
// the SELECT) owns it until it leaves its partition's window, by then
// recorded; a record registering the id meanwhile follows it: it waits for
// the owner's outcome and is a duplicate if the owner succeeded (or was
// found recorded), and calls the handler itself if the owner failed or was
// abandoned.
//
// Registration happens in one total order that is consistent with each
// partition's offset order, and a record only ever waits on records
// registered before it (its owner, or records ahead of it in its lane), so
// waits cannot form a cycle. A follower holds no MaxInFlight slot while it
// waits.
type claims struct {
	mu sync.Mutex
	m  map[uuid.UUID]*claim
}

type claim struct {
	owner     *xrec
	done      chan struct{} // closed at the owner's outcome
	resolved  bool
	succeeded bool // read after done is closed
}

func newClaims() *claims { return &claims{m: map[uuid.UUID]*claim{}} }

// register makes r the owner of id, or a follower of its current owner.
func (cl *claims) register(id uuid.UUID, r *xrec) (c *claim, owner bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c, ok := cl.m[id]; ok {
		return c, false
	}
	c = &claim{owner: r, done: make(chan struct{})}
	cl.m[id] = c
	return c, true
}

// resolve records the owner's outcome once. A failed owner gives the id up,
// so that a later record of it registers afresh.
func (cl *claims) resolve(id uuid.UUID, c *claim, succeeded bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c.resolved {
		return
	}
	c.resolved, c.succeeded = true, succeeded
	close(c.done)
	if !succeeded && cl.m[id] == c {
		delete(cl.m, id)
	}
}

// release ends r's ownership when r leaves its partition's window (its id
// recorded, or its partition abandoned); an unresolved claim resolves as
// failed, so followers call for themselves.
func (cl *claims) release(id uuid.UUID, c *claim) {
	cl.resolve(id, c, false)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.m[id] == c {
		delete(cl.m, id)
	}
}
