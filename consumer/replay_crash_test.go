package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// TestReplay_CrashAfterCommitStillWritesBack: a replay that dies after the
// transaction recording a failed-again record's outcome and position
// committed, before the record was written back to the dead-letter topic
// (a kill -9 there), still has it written back once resumed: its count
// never stands for a record the topic does not hold.
func TestReplay_CrashAfterCommitStillWritesBack(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	id := newID(t)
	e.failIDs.Store(id, consumer.Permanent(errors.New("still broken")))
	e.kafka.Produce(t, e.topic, event(id, 0, ""))
	r := e.start(e.config(), nil)
	e.waitCaughtUp(t, 30*time.Second)
	readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	spec := replay.Spec{ID: "crash", Mode: replay.ModeApply}
	crash := errors.New("simulated crash between the database commit and the write-back")
	var crashed atomic.Bool
	c, err := consumer.New(e.config(), e.handler)
	if err != nil {
		t.Fatal(err)
	}
	consumer.SetAfterDBCommitHook(c, func(int, int64) error {
		crashed.Store(true)
		return crash
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, _ := c.Replay(ctx, spec)
	if !crashed.Load() {
		t.Fatalf("the hook never ran: %+v", first)
	}
	res := e.replayRun(t, spec)
	if want := (replay.Counts{Selected: 1, FailedAgain: 1}); res.Counts != want || !res.Complete {
		t.Fatalf("resumed: %+v, want %+v", res, want)
	}
	dlq := readAll(t, e.kafka.Brokers(), e.dlq, 0, 2, 5*time.Second)
	back := 0
	for _, m := range dlq {
		if header(m, replay.HeaderReplayID) == spec.ID {
			back++
		}
	}
	if back != 1 {
		t.Fatalf("%d records written back by the replay, want 1 (dead-letter topic holds %d)", back, len(dlq))
	}
}

// TestReplay_ExternalCrashAfterRecordStillWritesBack: the same for an
// external handler, whose recording transaction carries the replay's
// position.
func TestReplay_ExternalCrashAfterRecordStillWritesBack(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	id := newID(t)
	h := func(context.Context, *consumer.Event) error {
		return consumer.Permanent(errors.New("provider refused"))
	}
	e.kafka.Produce(t, e.topic, event(id, 0, ""))
	live, err := consumer.NewExternal(e.config(), h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- live.Run(ctx) }()
	e.waitCaughtUp(t, 30*time.Second)
	readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 20*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	spec := replay.Spec{ID: "xcrash", Mode: replay.ModeApply}
	var crashed atomic.Bool
	run := func(crash bool) replay.Result {
		c, err := consumer.NewExternal(e.config(), h)
		if err != nil {
			t.Fatal(err)
		}
		if crash {
			consumer.SetAfterDBCommitHook(c, func(int, int64) error {
				crashed.Store(true)
				return errors.New("simulated crash between the recording and the write-back")
			})
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		res, _ := c.Replay(rctx, spec)
		return res
	}
	if first := run(true); !crashed.Load() {
		t.Fatalf("the hook never ran: %+v", first)
	}
	res := run(false)
	if want := (replay.Counts{Selected: 1, FailedAgain: 1}); res.Counts != want || !res.Complete {
		t.Fatalf("resumed: %+v, want %+v", res, want)
	}
	dlq := readAll(t, e.kafka.Brokers(), e.dlq, 0, 2, 5*time.Second)
	back := 0
	for _, m := range dlq {
		if header(m, replay.HeaderReplayID) == spec.ID {
			back++
		}
	}
	if back != 1 {
		t.Fatalf("%d records written back by the replay, want 1 (dead-letter topic holds %d)", back, len(dlq))
	}
}
