package consumer_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestExternalFullWindowBatchesRecording: while an unfinished record at the
// head of a partition's window holds it full, the calls that finish behind
// it are recorded in a few transactions (every BatchWait, or half the
// look-ahead at once), not one transaction per finished call.
func TestExternalFullWindowBatchesRecording(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const maxInFlight, others = 4, 40 // look-ahead: 16 records
	slow := newID(t)
	msgs := []kafka.Message{keyed(slow, 0, "slow", 1)}
	for i := range others {
		msgs = append(msgs, keyed(newID(t), 0, "k"+strconv.Itoa(i), 1))
	}
	e.kafka.Produce(t, e.topic, msgs...)
	release := make(chan struct{})
	x := newXRecorder(t, time.Millisecond)
	x.before = func(ctx context.Context, ev *consumer.Event) error {
		if ev.ID == slow {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	var txs atomic.Int64
	e.startExternal(e.config(func(c *consumer.Config) {
		c.MaxInFlight = maxInFlight
		c.BatchWait = 300 * time.Millisecond
	}), x.handle, func(c *consumer.Consumer) {
		consumer.SetBeforeRecordHook(c, func(int, []uuid.UUID) error {
			txs.Add(1)
			return nil
		})
	})
	// The window holds the slow record and 15 others; those 15 finish.
	waitFor(t, 30*time.Second, "the 15 records behind the slow one to be recorded", func() (bool, string) {
		rows, _ := e.dedupRows(t)
		return rows == 15, fmt.Sprintf("%d rows", rows)
	})
	time.Sleep(1500 * time.Millisecond) // a few flush intervals and a loop tick
	if n := txs.Load(); n > 4 {
		t.Errorf("%d recording transactions for 15 records finished behind a full window's unfinished head; want at most 4", n)
	}
	t.Logf("%d recording transactions while the window was held full", txs.Load())
	close(release)
	e.waitCaughtUp(t, 30*time.Second)
	if rows, distinct := e.dedupRows(t); rows != others+1 || distinct != others+1 {
		t.Fatalf("%d dedup rows (%d distinct), want %d", rows, distinct, others+1)
	}
}
