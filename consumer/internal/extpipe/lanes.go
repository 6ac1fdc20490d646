package extpipe

import (
	"container/heap"
	"container/list"
	"context"
	"sync"
	"time"
)

// lanes orders one partition's ready records by Config.Ordering: a record
// starts when no earlier record of its lane is running. OrderingPartition
// has one lane, OrderingKey one per Kafka key (records without a key share
// one), OrderingUnordered none (every record starts at once).
type lanes struct {
	ordering Ordering
	m        map[string]*lane
	waiting  int // records queued behind a running one of their lane
}

type lane struct {
	queue []*entry // in offset order, not started
}

func newLanes(o Ordering) *lanes { return &lanes{ordering: o, m: map[string]*lane{}} }

// laneOf returns the lane key of r, and false under OrderingUnordered.
func (l *lanes) laneOf(r *entry) (string, bool) {
	switch l.ordering {
	case OrderingUnordered:
		return "", false
	case OrderingKey:
		return string(r.Msg.Key), true
	default:
		return "", true
	}
}

// add queues r and reports whether it may start now.
func (l *lanes) add(r *entry) bool {
	k, ok := l.laneOf(r)
	if !ok {
		return true
	}
	ln, busy := l.m[k]
	if !busy {
		l.m[k] = &lane{}
		return true
	}
	ln.queue = append(ln.queue, r)
	l.waiting++
	return false
}

// same reports whether a and b are of one lane.
func (l *lanes) same(a, b *entry) bool {
	ka, oka := l.laneOf(a)
	kb, okb := l.laneOf(b)
	return oka && okb && ka == kb
}

// behind returns how many records of r's lane are queued behind it.
func (l *lanes) behind(r *entry) int {
	k, ok := l.laneOf(r)
	if !ok {
		return 0
	}
	if ln := l.m[k]; ln != nil {
		return len(ln.queue)
	}
	return 0
}

// done ends r's turn and returns the next record of its lane to start, if
// any.
func (l *lanes) done(r *entry) *entry {
	k, ok := l.laneOf(r)
	if !ok {
		return nil
	}
	ln := l.m[k]
	if ln == nil {
		return nil
	}
	if len(ln.queue) == 0 {
		delete(l.m, k)
		return nil
	}
	next := ln.queue[0]
	ln.queue[0] = nil
	ln.queue = ln.queue[1:]
	l.waiting--
	return next
}

// slots is the process-wide MaxInFlight bound on external handler calls.
// A freed slot goes to the waiting call whose lane has the most records
// queued behind it (the earliest waiter among equals), not simply to the
// earliest waiter: with more lanes ready than slots, first-come order makes
// each step of a long lane wait behind a step of every other lane, so the
// longest lanes finish last, one call at a time, with most slots idle.
// Serving long lanes first keeps enough lanes busy until the end. So that a
// short lane is not starved (its record may be the oldest of its
// partition's window, which holds the committed offset and, full, the
// fetching), a call that has waited more than starveFactor times the mean
// call is served first.
type slots struct {
	mu      sync.Mutex
	free    int
	seq     uint64
	waiting slotQueue     // by priority
	arrival list.List     // of *slotWaiter, oldest first
	mean    time.Duration // moving mean of how long a slot is held
}

// starveFactor times the mean call is the longest a call waits for a slot
// while calls of longer lanes are served before it.
const starveFactor = 4

type slotWaiter struct {
	prio  int
	seq   uint64
	since time.Time
	ready chan struct{} // closed when the slot is handed over
	index int           // in waiting; -1 once handed over
	elem  *list.Element // in arrival
}

func newSlots(n int) *slots { return &slots{free: n} }

// acquire takes a slot for a call whose lane has prio records queued behind
// it; false if ctx ended first.
func (s *slots) acquire(ctx context.Context, prio int) bool {
	s.mu.Lock()
	if s.free > 0 && s.waiting.Len() == 0 {
		s.free--
		s.mu.Unlock()
		return true
	}
	s.seq++
	w := &slotWaiter{prio: prio, seq: s.seq, since: time.Now(), ready: make(chan struct{})}
	heap.Push(&s.waiting, w)
	w.elem = s.arrival.PushBack(w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return true
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.index >= 0 {
		heap.Remove(&s.waiting, w.index)
		s.arrival.Remove(w.elem)
		return false
	}
	s.releaseLocked() // handed over meanwhile: pass it on
	return false
}

// release gives a slot back after a call that held it for held, to the
// next waiter if any.
func (s *slots) release(held time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mean == 0 {
		s.mean = held
	} else {
		s.mean += (held - s.mean) / 16
	}
	s.releaseLocked()
}

func (s *slots) releaseLocked() {
	if s.waiting.Len() == 0 {
		s.free++
		return
	}
	var w *slotWaiter
	if old := s.arrival.Front().Value.(*slotWaiter); time.Since(old.since) > starveFactor*s.mean {
		w = old
		heap.Remove(&s.waiting, w.index)
	} else {
		w = heap.Pop(&s.waiting).(*slotWaiter)
	}
	s.arrival.Remove(w.elem)
	close(w.ready)
}

// slotQueue is a max-heap by prio, then min by seq (container/heap).
type slotQueue []*slotWaiter

func (q slotQueue) Len() int { return len(q) }
func (q slotQueue) Less(i, j int) bool {
	if q[i].prio != q[j].prio {
		return q[i].prio > q[j].prio
	}
	return q[i].seq < q[j].seq
}
func (q slotQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *slotQueue) Push(x any) {
	w := x.(*slotWaiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *slotQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	w.index = -1
	return w
}
