package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// TestReplay_CancelledResumes: a replay stopped mid-way reports an
// incomplete result with what it did; the same id resumes, applies nothing
// twice and reports the whole run's counts.
func TestReplay_CancelledResumes(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const n = 60
	deadLetterN(t, e, n)
	// At 20/s for 1.5 s: about 30 applied, with time to spare for the
	// replay's set-up on a loaded machine, and far from all 60.
	spec := replay.Spec{ID: "slow", Mode: replay.ModeApply, RatePerSecond: 20}
	small := func(c *consumer.Config) { c.BatchSize = 5 }
	c, err := consumer.New(e.config(small), e.handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	first, err := c.Replay(ctx, spec)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if first.Complete || first.Applied == 0 || first.Applied >= n || first.Error == "" {
		t.Fatalf("first run: %+v; want incomplete with some applied", first)
	}
	if rows, _ := e.effects(t); int64(rows) != first.Applied {
		t.Fatalf("%d effects, the result says %d applied", rows, first.Applied)
	}
	c, err = consumer.New(e.config(small), e.handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec.RatePerSecond = 0
	second, err := c.Replay(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := (replay.Counts{Selected: n, Applied: n}); second.Counts != want || !second.Complete {
		t.Fatalf("resumed: %+v, want %+v", second, want)
	}
	if rows, distinct := e.effects(t); rows != n || distinct != n {
		t.Fatalf("effects: %d rows, %d ids; want %d", rows, distinct, n)
	}
}

// TestReplay_RateHoldsUpToADeadline: a replay whose context has a deadline
// keeps its rate up to that deadline. golang.org/x/time/rate's Wait refuses
// at once when the next token comes after the deadline; taken as "go on",
// that let every remaining record through unthrottled in the last moments
// (CI: TestReplay_CancelledResumes then finished all 60 records at 40/s
// within 700 ms). At 1 record/s with a 1.5 s deadline, two records are taken in
// time and at most one batch more as the replay stops.
func TestReplay_RateHoldsUpToADeadline(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const n, batch = 60, 5
	deadLetterN(t, e, n)
	c, err := consumer.New(e.config(func(c *consumer.Config) { c.BatchSize = batch }), e.handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	res, err := c.Replay(ctx, replay.Spec{ID: "deadline", Mode: replay.ModeApply, RatePerSecond: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Complete || res.Applied > 2+batch {
		t.Fatalf("result %+v; want incomplete with at most %d applied (1/s for 1.5 s, and the batch in hand as it stops)", res, 2+batch)
	}
}

// deadLetterN dead-letters n new events (deadLetterAll).
func deadLetterN(t *testing.T, e *env, n int) {
	t.Helper()
	ids := make([]uuid.UUID, n)
	msgs := make([]kafka.Message, n)
	for i := range ids {
		ids[i] = newID(t)
		msgs[i] = event(ids[i], 0, "")
	}
	e.deadLetterAll(t, ids, n, msgs...)
}
