package extpipe

import (
	"context"
	"testing"
	"time"
)

// TestSlotsServeLongestLaneFirst: a freed slot goes to the waiter with the
// most records queued behind it, the earliest among equals; a waiter whose
// context ends leaves the queue, and a slot handed to it as it gave up is
// passed on, not lost. (Calls of an hour: no waiter is starved.)
func TestSlotsServeLongestLaneFirst(t *testing.T) {
	s := newSlots(1)
	ctx := context.Background()
	if !s.acquire(ctx, 0) {
		t.Fatal("first acquire failed")
	}
	order := make(chan int, 4)
	start := func(name, prio int) {
		go func() {
			if s.acquire(ctx, prio) {
				order <- name
			}
		}()
		waitQueued(t, s, name)
	}
	start(1, 0)
	start(2, 5)
	start(3, 5)
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan bool)
	go func() { gaveUp <- s.acquire(cctx, 9) }()
	waitQueued(t, s, 4)
	cancel()
	if <-gaveUp {
		t.Fatal("acquire with an ended context returned true")
	}
	var got []int
	for range 3 {
		s.release(time.Hour)
		got = append(got, <-order)
	}
	if want := []int{2, 3, 1}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("slots served %v, want %v", got, want)
	}
	s.release(time.Hour)
	if s.free != 1 || s.waiting.Len() != 0 {
		t.Fatalf("free %d, waiting %d after all released; want 1, 0", s.free, s.waiting.Len())
	}
}

// waitQueued waits until n acquires are queued in s.
func waitQueued(t *testing.T, s *slots, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		q := s.seq
		s.mu.Unlock()
		if q >= uint64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlotsServeStarvedFirst: a waiter that has waited more than
// starveFactor mean calls is served before waiters of longer lanes.
func TestSlotsServeStarvedFirst(t *testing.T) {
	s := newSlots(1)
	ctx := context.Background()
	if !s.acquire(ctx, 0) {
		t.Fatal("first acquire failed")
	}
	order := make(chan int, 2)
	for i, prio := range []int{0, 5} {
		go func() {
			if s.acquire(ctx, prio) {
				order <- i
			}
		}()
		waitQueued(t, s, i+1)
	}
	time.Sleep(20 * time.Millisecond)
	s.release(time.Millisecond) // mean 1 ms: both have waited far longer
	if got := <-order; got != 0 {
		t.Fatalf("served waiter %d first, want the oldest (0)", got)
	}
	s.release(time.Millisecond)
	<-order
}
