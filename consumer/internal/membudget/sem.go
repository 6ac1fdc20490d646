package membudget

import (
	"container/list"
	"context"
	"sync"
)

// sem is a weighted semaphore whose capacity can change while it is held
// (an in-place resize of the container's memory): golang.org/x/sync's
// semaphore.Weighted has a fixed size. Waiters are served in order, as
// there: a waiting request blocks TryAcquire and later requests, so a large
// batch is not starved by small ones. A request larger than the capacity
// is granted when nothing else is held, and then holds the semaphore alone
// (a record larger than the budget goes through by itself). After a shrink
// the semaphore may hold more than its capacity until enough is released;
// nothing new is granted meanwhile.
type sem struct {
	mu      sync.Mutex
	size    int64
	cur     int64
	waiters list.List // of *waiter, in arrival order
}

type waiter struct {
	n     int64
	ready chan struct{} // closed when granted
}

func newSem(size int64) *sem { return &sem{size: size} }

// fits reports whether n can be granted now (mu held).
func (s *sem) fits(n int64) bool { return s.cur+n <= s.size || s.cur == 0 }

// Acquire waits for n, or for ctx to end (then nothing is held).
func (s *sem) Acquire(ctx context.Context, n int64) error {
	s.mu.Lock()
	if s.waiters.Len() == 0 && s.fits(n) {
		s.cur += n
		s.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	elem := s.waiters.PushBack(w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-w.ready:
			// Granted while giving up: give it back.
			s.cur -= n
		default:
			s.waiters.Remove(elem)
		}
		s.grant()
		s.mu.Unlock()
		return ctx.Err()
	}
}

// TryAcquire takes n if it can be had now and nobody waits.
func (s *sem) TryAcquire(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiters.Len() != 0 || s.cur+n > s.size {
		return false
	}
	s.cur += n
	return true
}

// Release gives back n acquired before.
func (s *sem) Release(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur -= n
	if s.cur < 0 {
		panic("membudget: released more than held")
	}
	s.grant()
}

// Resize sets the capacity; waiters that fit now are granted.
func (s *sem) Resize(size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.size = size
	s.grant()
}

// grant serves waiters in order while the first fits (mu held).
func (s *sem) grant() {
	for {
		front := s.waiters.Front()
		if front == nil {
			return
		}
		w := front.Value.(*waiter)
		if !s.fits(w.n) {
			return
		}
		s.cur += w.n
		s.waiters.Remove(front)
		close(w.ready)
	}
}
