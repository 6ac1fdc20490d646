package kafka

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The DrainTimeout patch (PATCH.md): after the generation ends, the
// heartbeat loop goes on while the generation's other functions finish.

// drainGeneration is a generation whose heartbeats are counted and answered
// by answer (nil: success), each taking slow.
func drainGeneration(beats *atomic.Int64, answer func() error, slow time.Duration) *Generation {
	return &Generation{
		conn: mockCoordinator{heartbeatFunc: func(heartbeatRequestV0) (heartbeatResponseV0, error) {
			beats.Add(1)
			time.Sleep(slow)
			if answer != nil {
				return heartbeatResponseV0{}, answer()
			}
			return heartbeatResponseV0{}, nil
		}},
		done:     make(chan struct{}),
		joined:   make(chan struct{}),
		log:      func(func(Logger)) {},
		logError: func(func(Logger)) {},
	}
}

// startWorking starts a function on gen that, once the generation ends,
// works for work before it returns.
func startWorking(gen *Generation, work time.Duration) {
	gen.Start(func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(work)
	})
}

// closeGen closes gen and returns how long close took.
func closeGen(t *testing.T, gen *Generation) time.Duration {
	t.Helper()
	start := time.Now()
	closed := make(chan struct{})
	go func() { gen.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return")
	}
	return time.Since(start)
}

// closeWhileWorking closes gen while a function started on it works for
// work after the generation ends; it returns how long close took and how
// many heartbeats were sent after the generation ended.
func closeWhileWorking(t *testing.T, gen *Generation, beats *atomic.Int64, work time.Duration) (time.Duration, int64) {
	t.Helper()
	startWorking(gen, work)
	time.Sleep(50 * time.Millisecond) // a few beats while the generation runs
	before := beats.Load()
	took := closeGen(t, gen)
	return took, beats.Load() - before
}

func TestDrainTimeout_HeartbeatsWhileFunctionsFinish(t *testing.T) {
	var beats atomic.Int64
	gen := drainGeneration(&beats, nil, 0)
	gen.heartbeatLoop(10*time.Millisecond, 5*time.Second)
	took, after := closeWhileWorking(t, gen, &beats, 300*time.Millisecond)
	if after < 10 {
		t.Errorf("%d heartbeats while the function finished over 300ms at a 10ms interval; want them to go on", after)
	}
	// close returns once the function has returned, not at the drain timeout.
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("close took %v; want about the 300ms the function needed", took)
	}
}

func TestDrainTimeout_ZeroStopsHeartbeatsAtOnce(t *testing.T) {
	var beats atomic.Int64
	gen := drainGeneration(&beats, nil, 0)
	gen.heartbeatLoop(10*time.Millisecond, 0)
	_, after := closeWhileWorking(t, gen, &beats, 300*time.Millisecond)
	if after > 1 {
		t.Errorf("%d heartbeats after the generation ended without DrainTimeout; want none (upstream behaviour)", after)
	}
}

func TestDrainTimeout_BoundsTheDrain(t *testing.T) {
	var beats atomic.Int64
	gen := drainGeneration(&beats, nil, 0)
	gen.heartbeatLoop(10*time.Millisecond, 200*time.Millisecond)
	_, after := closeWhileWorking(t, gen, &beats, time.Second)
	if after < 5 || after > 40 {
		t.Errorf("%d heartbeats after the generation ended, with a 200ms drain at 10ms; want them for the drain only", after)
	}
}

// A member the coordinator no longer knows stops beating at once; close
// still waits for the generation's function.
func TestDrainTimeout_EndsOnAHeartbeatError(t *testing.T) {
	var beats atomic.Int64
	var failing atomic.Bool
	gen := drainGeneration(&beats, func() error {
		if failing.Load() {
			return UnknownMemberId
		}
		return nil
	}, 0)
	gen.heartbeatLoop(10*time.Millisecond, 5*time.Second)
	startWorking(gen, 500*time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	took := make(chan time.Duration, 1)
	go func() { took <- closeGen(t, gen) }()
	time.Sleep(50 * time.Millisecond)
	if beats.Load() < 3 {
		t.Fatalf("%d heartbeats in 80ms at 10ms; want the drain to beat", beats.Load())
	}
	failing.Store(true)
	time.Sleep(50 * time.Millisecond)
	n := beats.Load()
	time.Sleep(200 * time.Millisecond)
	if m := beats.Load(); m != n {
		t.Errorf("%d heartbeats after one failed with UnknownMemberId; want none", m-n)
	}
	if d := <-took; d < 400*time.Millisecond {
		t.Errorf("close took %v; want it to wait for the function's 500ms", d)
	}
}

// RebalanceInProgress renews the member's session: it ends the generation,
// and the member goes on beating while the generation's function finishes,
// so that function's commit is still the generation's.
func TestDrainTimeout_RebalanceEndsTheGenerationAndDrains(t *testing.T) {
	var beats atomic.Int64
	var rebalancing atomic.Bool
	gen := drainGeneration(&beats, func() error {
		if rebalancing.Load() {
			return RebalanceInProgress
		}
		return nil
	}, 0)
	gen.heartbeatLoop(10*time.Millisecond, 5*time.Second)
	startWorking(gen, 300*time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	rebalancing.Store(true)
	select {
	case <-gen.done:
	case <-time.After(2 * time.Second):
		t.Fatal("RebalanceInProgress did not end the generation")
	}
	n := beats.Load()
	select {
	case <-gen.joined:
	case <-time.After(5 * time.Second):
		t.Fatal("the generation's functions did not return")
	}
	if d := beats.Load() - n; d < 10 {
		t.Errorf("%d heartbeats while the function finished over 300ms at 10ms after RebalanceInProgress; want them to go on", d)
	}
}

// A generation ended by one of its functions returning (a partition
// watcher) drains the others too.
func TestDrainTimeout_GenerationEndedByAFunction(t *testing.T) {
	var beats atomic.Int64
	gen := drainGeneration(&beats, nil, 0)
	gen.heartbeatLoop(10*time.Millisecond, 5*time.Second)
	startWorking(gen, 300*time.Millisecond)
	gen.Start(func(context.Context) { time.Sleep(30 * time.Millisecond) })
	select {
	case <-gen.done:
	case <-time.After(2 * time.Second):
		t.Fatal("a function's return did not end the generation")
	}
	n := beats.Load()
	select {
	case <-gen.joined:
	case <-time.After(5 * time.Second):
		t.Fatal("the generation's functions did not return")
	}
	if d := beats.Load() - n; d < 10 {
		t.Errorf("%d heartbeats while the other function finished over 300ms at 10ms; want them to go on", d)
	}
}

// Heartbeats that block (a slow coordinator) do not chain past the end of
// the drain: close returns within about one heartbeat of the function.
func TestDrainTimeout_SlowHeartbeatsDoNotHoldClose(t *testing.T) {
	for range 5 {
		var beats atomic.Int64
		gen := drainGeneration(&beats, nil, 300*time.Millisecond)
		gen.heartbeatLoop(10*time.Millisecond, 10*time.Second)
		startWorking(gen, 100*time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		if took := closeGen(t, gen); took > 900*time.Millisecond {
			t.Fatalf("close took %v for a function that needed 100ms with 300ms heartbeats; want at most one heartbeat after it", took)
		}
	}
}

func TestDrainTimeout_NoOtherFunctions(t *testing.T) {
	var beats atomic.Int64
	gen := drainGeneration(&beats, nil, 0)
	gen.heartbeatLoop(10*time.Millisecond, 5*time.Second)
	if d := closeGen(t, gen); d > time.Second {
		t.Errorf("close took %v with only the heartbeat running; want at once", d)
	}
}
