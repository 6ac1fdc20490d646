package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestExternalCopyAfterTakeOverIsDuplicate: three records of one id; the
// first to be called fails all its attempts and is dead-lettered, giving its
// claim up; one of the two copies takes the id over and succeeds. The other
// copy, which followed the failed record's claim too, must settle on the
// copy that took over (a duplicate), not call again: within one process and
// no rebalance an id's effect succeeds once (docs/design.md). In one
// partition under one key the copies take over one after the other; across
// two partitions they do at the same time.
func TestExternalCopyAfterTakeOverIsDuplicate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts int
		recs  func(id uuid.UUID) []kafka.Message
	}{
		{name: "one partition, one key", parts: 1, recs: func(id uuid.UUID) []kafka.Message {
			return []kafka.Message{keyed(id, 0, "k", 0), keyed(id, 0, "k", 0), keyed(id, 0, "k", 0)}
		}},
		{name: "two partitions", parts: 2, recs: func(id uuid.UUID) []kafka.Message {
			k0, k1 := keyOn(0, 2, "a"), keyOn(1, 2, "b")
			return []kafka.Message{keyed(id, 0, k0, 0), keyed(id, 0, k0, 0), keyed(id, 1, k1, 0)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withPartitions(tc.parts))
			e.dumpLogsOnFailure(t)
			id := newID(t)
			e.kafka.Produce(t, e.topic, tc.recs(id)...)

			// The first record called fails every attempt, slowly enough
			// that every copy is fetched and follows it; the others succeed
			// after a while, so a copy that takes over is still calling
			// when the last one settles.
			var mu sync.Mutex
			doomed := ""
			succeeded := map[string]int{} // partition/offset -> successful calls
			h := func(ctx context.Context, ev *consumer.Event) error {
				rec := fmt.Sprintf("%d/%d", ev.Partition, ev.Offset)
				mu.Lock()
				if doomed == "" {
					doomed = rec
				}
				fail := doomed == rec
				mu.Unlock()
				select {
				case <-time.After(300 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
				if fail {
					return errors.New("provider refused")
				}
				mu.Lock()
				succeeded[rec]++
				mu.Unlock()
				return nil
			}
			e.startExternal(e.config(), h)
			e.waitCaughtUp(t, 30*time.Second)
			time.Sleep(500 * time.Millisecond) // a late call would show now

			mu.Lock()
			defer mu.Unlock()
			total := 0
			for _, n := range succeeded {
				total += n
			}
			if total != 1 {
				t.Fatalf("the id's effect succeeded %d times (per record: %v; the first, %s, failed), want once", total, succeeded, doomed)
			}
			if rows, distinct := e.dedupRows(t); rows != 1 || distinct != 1 {
				t.Fatalf("%d dedup rows (%d distinct), want 1", rows, distinct)
			}
			if got := readAll(t, e.kafka.Brokers(), e.dlq, 0, 2, 2*time.Second); len(got) != 1 {
				t.Fatalf("%d dead letters, want 1 (the failed first record)", len(got))
			}
		})
	}
}
