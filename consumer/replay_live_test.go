package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// TestReplay_WhileLiveMeetsSameIDs: the live consumer keeps running and
// receives the same ids again while a replay of their dead letters runs:
// each id takes effect once, and the replay's outcomes add up.
func TestReplay_WhileLiveMeetsSameIDs(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const n = 200
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = newID(t)
		e.failIDs.Store(ids[i], consumer.Permanent(errors.New("bug")))
		e.kafka.Produce(t, e.topic, event(ids[i], 0, ""))
	}
	r := e.start(e.config(), nil)
	defer func() { _ = r.stop(t) }()
	e.waitCaughtUp(t, 30*time.Second)
	readAll(t, e.kafka.Brokers(), e.dlq, 0, n, 20*time.Second)
	for _, id := range ids {
		e.failIDs.Delete(id)
	}
	// The same ids again on the live topic, while the replay runs. The
	// goroutine reports to the test rather than fail it: it once went on
	// producing after the test had ended, and its t.Fatalf panicked the
	// package ("Fail in goroutine after ... has completed").
	produced := make(chan error, 1)
	go func() {
		w := e.kafka.Writer(e.topic)
		defer func() { _ = w.Close() }()
		pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
		defer pcancel()
		for _, id := range ids {
			if err := w.WriteMessages(pctx, event(id, 0, "")); err != nil {
				produced <- err
				return
			}
		}
		produced <- nil
	}()
	c, err := consumer.New(e.config(func(c *consumer.Config) { c.BatchSize = 10 }), e.handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Replay(ctx, replay.Spec{ID: "live", Mode: replay.ModeApply})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete || res.Selected != n || res.Applied+res.Duplicates != n {
		t.Fatalf("replay: %+v", res)
	}
	if err := <-produced; err != nil {
		t.Fatalf("producing the ids again: %v", err)
	}
	e.waitCaughtUp(t, 30*time.Second)
	if rows, distinct := e.effects(t); rows != n || distinct != n {
		t.Fatalf("effects: %d rows, %d ids; want %d each", rows, distinct, n)
	}
	t.Logf("replay applied %d, duplicates %d", res.Applied, res.Duplicates)
}
