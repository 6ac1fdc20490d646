package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// TestReplayEndsPromptlyAfterItsLastRecord: a replay returns soon after
// its last record took effect. Its readers stop at an end offset known in
// advance, and closing a reader waits for the fetch in flight: with the live
// consumer's 500ms fetch wait every replay (and every replay Job) ended up
// to half a second after its work, a tenth of the run in `make bench`
// (BENCH=replay).
func TestReplayEndsPromptlyAfterItsLastRecord(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ids := make([]uuid.UUID, 5)
	for i := range ids {
		ids[i] = newID(t)
		e.failIDs.Store(ids[i], consumer.Permanent(errors.New("ledger refused")))
		e.kafka.Produce(t, e.topic, event(ids[i], 0, ""))
	}
	r := e.start(e.config(), nil)
	e.waitCaughtUp(t, 30*time.Second)
	readAll(t, e.kafka.Brokers(), e.dlq, 0, len(ids), 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		e.failIDs.Delete(id)
	}

	var last atomic.Int64
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		err := e.handler(ctx, tx, ev)
		last.Store(time.Now().UnixNano())
		return err
	}
	c, err := consumer.New(e.config(), h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Replay(ctx, replay.Spec{ID: "tail", Mode: replay.ModeApply})
	if err != nil {
		t.Fatal(err)
	}
	tail := time.Since(time.Unix(0, last.Load()))
	if res.Applied != int64(len(ids)) || !res.Complete {
		t.Fatalf("replay: %+v", res)
	}
	// The last transaction's commit and the result's reads: a few ms.
	if tail > 250*time.Millisecond {
		t.Fatalf("the replay returned %v after its last record", tail.Round(time.Millisecond))
	}
	t.Logf("the replay returned %v after its last record", tail.Round(time.Millisecond))
}
