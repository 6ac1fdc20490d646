package consumer_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// TestReplay_EveryCopyThatFailsAgainIsParked: an id dead-lettered twice (two
// copies of the event in the topic) that fails again on a replay with
// maxReplays 1 has both its dead letters parked, whether the replay takes
// them in one batch or in two: neither is a "duplicate" (already applied),
// since the id never took effect.
func TestReplay_EveryCopyThatFailsAgainIsParked(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	id, other := newID(t), newID(t)
	e.failIDs.Store(id, consumer.Permanent(errors.New("still broken")))
	for _, x := range []uuid.UUID{id, other, id} {
		e.kafka.Produce(t, e.topic, event(x, 0, ""))
	}
	one := func(c *consumer.Config) { c.BatchSize = 1 }
	r := e.start(e.config(one), nil)
	e.waitCaughtUp(t, 30*time.Second)
	readAll(t, e.kafka.Brokers(), e.dlq, 0, 2, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	sel := replay.Selection{Reasons: []consumer.Reason{consumer.ReasonHandlerFailed}}
	for _, batch := range []int{1, 100} {
		spec := replay.Spec{ID: fmt.Sprintf("park-batch-%d", batch), Mode: replay.ModeApply, MaxReplays: 1, Selection: sel}
		res := e.replayRunWith(t, spec, func(c *consumer.Config) { c.BatchSize = batch })
		if want := (replay.Counts{Selected: 2, Parked: 2}); res.Counts != want || !res.Complete {
			t.Errorf("batch size %d: %+v, want counts %+v", batch, res, want)
		}
	}
	if rows, _ := e.effects(t); rows != 1 {
		t.Fatalf("%d effects, want 1 (the other id's)", rows)
	}
}
