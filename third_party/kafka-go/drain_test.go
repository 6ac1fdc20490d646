package kafka

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The DrainTimeout patch (PATCH.md): after the generation ends, the
// heartbeat loop goes on while the generation's other functions finish.

func drainGeneration(beats *atomic.Int64, fail func() bool) *Generation {
	return &Generation{
		conn: mockCoordinator{heartbeatFunc: func(heartbeatRequestV0) (heartbeatResponseV0, error) {
			beats.Add(1)
			if fail != nil && fail() {
				return heartbeatResponseV0{}, RebalanceInProgress
			}
			return heartbeatResponseV0{}, nil
		}},
		done:     make(chan struct{}),
		joined:   make(chan struct{}),
		log:      func(func(Logger)) {},
		logError: func(func(Logger)) {},
	}
}

// closeWhileWorking closes gen while a function started on it works for
// work after the generation ends; it returns how long close took and how
// many heartbeats were sent after the generation ended.
func closeWhileWorking(t *testing.T, gen *Generation, beats *atomic.Int64, work time.Duration) (time.Duration, int64) {
	t.Helper()
	gen.Start(func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(work)
	})
	time.Sleep(50 * time.Millisecond) // a few beats while the generation runs
	before := beats.Load()
	start := time.Now()
	closed := make(chan struct{})
	go func() { gen.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return")
	}
	return time.Since(start), beats.Load() - before
}

func TestDrainTimeout_HeartbeatsWhileFunctionsFinish(t *testing.T) {
	var beats atomic.Int64
	gen := drainGeneration(&beats, nil)
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
	gen := drainGeneration(&beats, nil)
	gen.heartbeatLoop(10*time.Millisecond, 0)
	_, after := closeWhileWorking(t, gen, &beats, 300*time.Millisecond)
	if after > 1 {
		t.Errorf("%d heartbeats after the generation ended without DrainTimeout; want none (upstream behaviour)", after)
	}
}

func TestDrainTimeout_BoundsTheDrain(t *testing.T) {
	var beats atomic.Int64
	gen := drainGeneration(&beats, nil)
	gen.heartbeatLoop(10*time.Millisecond, 200*time.Millisecond)
	_, after := closeWhileWorking(t, gen, &beats, time.Second)
	if after < 5 || after > 40 {
		t.Errorf("%d heartbeats after the generation ended, with a 200ms drain at 10ms; want them for the drain only", after)
	}
}

func TestDrainTimeout_EndsOnAHeartbeatError(t *testing.T) {
	var beats atomic.Int64
	var failing atomic.Bool
	gen := drainGeneration(&beats, failing.Load)
	gen.heartbeatLoop(10*time.Millisecond, 5*time.Second)
	gen.Start(func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(500 * time.Millisecond)
	})
	time.Sleep(30 * time.Millisecond)
	go gen.close()
	time.Sleep(50 * time.Millisecond)
	failing.Store(true)
	time.Sleep(50 * time.Millisecond)
	n := beats.Load()
	time.Sleep(200 * time.Millisecond)
	if m := beats.Load(); m != n {
		t.Errorf("%d heartbeats after one failed; want none", m-n)
	}
}

func TestDrainTimeout_NoOtherFunctions(t *testing.T) {
	var beats atomic.Int64
	gen := drainGeneration(&beats, nil)
	gen.heartbeatLoop(10*time.Millisecond, 5*time.Second)
	start := time.Now()
	gen.close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("close took %v with only the heartbeat running; want at once", d)
	}
}
