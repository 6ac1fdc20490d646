package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// TestReplay_ExternalHandler: the external pipeline replays the fixed dead
// letters once each (the dedup rows of the live group), with the original
// topic, partition and offset on the event, and writes the failing one back.
func TestReplay_ExternalHandler(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	var mu sync.Mutex
	calls := map[uuid.UUID]int{}
	var seen []consumer.Event
	fail := map[uuid.UUID]bool{}
	h := func(ctx context.Context, ev *consumer.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if fail[ev.ID] {
			return consumer.Permanent(errors.New("provider refused"))
		}
		calls[ev.ID]++
		seen = append(seen, *ev)
		return nil
	}
	ids := make([]uuid.UUID, 5)
	for i := range ids {
		ids[i] = newID(t)
		if i < 3 {
			fail[ids[i]] = true
		}
		e.kafka.Produce(t, e.topic, event(ids[i], 0, ""))
	}
	c, err := consumer.NewExternal(e.config(), h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	e.waitCaughtUp(t, 30*time.Second)
	readAll(t, e.kafka.Brokers(), e.dlq, 0, 3, 20*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	delete(fail, ids[1])
	delete(fail, ids[2])
	seen = nil
	mu.Unlock()

	run := func(id string) replay.Result {
		c, err := consumer.NewExternal(e.config(), h)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		defer rcancel()
		res, err := c.Replay(rctx, replay.Spec{ID: id, Mode: replay.ModeApply})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := run("x1")
	if want := (replay.Counts{Selected: 3, Applied: 2, FailedAgain: 1}); res.Counts != want || !res.Complete {
		t.Fatalf("replay: %+v, want %+v", res, want)
	}
	if again := run("x1"); again.Counts != res.Counts {
		t.Fatalf("again: %+v", again.Counts)
	}
	// A new replay id meets the applied ones as duplicates.
	if other := run("x2"); other.Duplicates != 2 || other.Applied != 0 {
		t.Fatalf("another replay: %+v", other.Counts)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids[1:] {
		if calls[id] != 1 {
			t.Fatalf("id %s called %d times", id, calls[id])
		}
	}
	for _, ev := range seen {
		if ev.Topic != e.topic || ev.Offset > 2 {
			t.Fatalf("replayed event carries topic %s offset %d", ev.Topic, ev.Offset)
		}
	}
	dlq := readAll(t, e.kafka.Brokers(), e.dlq, 0, 4, 20*time.Second)
	if header(dlq[3], "dlq-replays") != "1" || header(dlq[3], "dlq-event-id") != ids[0].String() {
		t.Fatalf("written back: %v", dlq[3].Headers)
	}
}
