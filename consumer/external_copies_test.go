package consumer_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer"
	"github.com/segmentio/kafka-go"
)

// TestExternalDuplicatesOnOtherPartitions: each id arrives twice, on two
// partitions under two keys; one process calls the handler once per id and
// records each id once.
func TestExternalDuplicatesOnOtherPartitions(t *testing.T) {
	e := newEnv(t, withPartitions(4))
	e.dumpLogsOnFailure(t)
	const n = 200
	var msgs []kafka.Message
	for i := range n {
		id := newID(t)
		msgs = append(msgs, keyed(id, i%4, "a"+strconv.Itoa(i), 0), keyed(id, (i+1)%4, "b"+strconv.Itoa(i), 0))
	}
	e.kafka.Produce(t, e.topic, msgs...)
	x := newXRecorder(t, 5*time.Millisecond)
	r := e.startExternal(e.config(), x.handle)
	e.waitCaughtUp(t, 60*time.Second)
	calls, _ := x.snapshot()
	if len(calls) != n {
		t.Fatalf("%d ids called, want %d", len(calls), n)
	}
	for id, c := range calls {
		if c != 1 {
			t.Fatalf("id %s called %d times, want once", id, c)
		}
	}
	if rows, distinct := e.dedupRows(t); rows != n || distinct != n {
		t.Fatalf("%d dedup rows (%d distinct), want %d", rows, distinct, n)
	}
	body := scrape(t, r.c)
	if d := metricValue(t, body, "idempotent_consumer_duplicates_skipped_total"); d != n {
		t.Errorf("duplicates_skipped_total %d, want %d", d, n)
	}
}

// TestExternalDuplicateWaitsForFirstRecord: a copy of an id on another
// partition (under another key) that arrives while the first record's call
// has succeeded but its dedup row is not written yet waits for that row: it
// neither calls the handler again nor lets its partition's offset move past
// it, so no committed offset ever covers an id that is not recorded.
func TestExternalDuplicateWaitsForFirstRecord(t *testing.T) {
	e := newEnv(t, withPartitions(2))
	e.dumpLogsOnFailure(t)
	id := newID(t)
	first, other := keyOn(0, 2, "first"), keyOn(1, 2, "copy")
	e.kafka.Produce(t, e.topic, keyed(id, 0, first, 0))
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	x := newXRecorder(t, time.Millisecond)
	e.startExternal(e.config(), x.handle, func(c *consumer.Consumer) {
		consumer.SetBeforeRecordHook(c, func(p int, ids []uuid.UUID) error {
			if p != 0 || !slices.Contains(ids, id) {
				return nil
			}
			once.Do(func() { close(blocked) })
			select { // the first record's recording transaction is late
			case <-release:
			case <-time.After(30 * time.Second):
			}
			return nil
		})
	})
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("the first record was not called and recorded")
	}
	e.kafka.Produce(t, e.topic, keyed(id, 1, other, 0))
	time.Sleep(time.Second) // many BatchWaits: the copy is looked up and settled if it is to be
	co, err := e.committed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := x.snapshot()
	close(release)
	if co[1] > 0 {
		t.Fatalf("partition 1 committed offset %d past the copy while the first record's dedup row was not written", co[1])
	}
	if calls[id] != 1 {
		t.Fatalf("id called %d times while its first record was being recorded, want 1", calls[id])
	}
	e.waitCaughtUp(t, 30*time.Second)
	calls, bad := x.snapshot()
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	if calls[id] != 1 {
		t.Fatalf("id called %d times, want 1", calls[id])
	}
	if rows, distinct := e.dedupRows(t); rows != 1 || distinct != 1 {
		t.Fatalf("%d dedup rows (%d distinct), want 1", rows, distinct)
	}
}

// keyOn returns a key with prefix that Kafka's default partitioner sends to
// partition p of parts.
func keyOn(p, parts int, prefix string) string {
	all := make([]int, parts)
	for i := range all {
		all[i] = i
	}
	for i := 0; ; i++ {
		k := prefix + strconv.Itoa(i)
		if (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(k)}, all...) == p {
			return k
		}
	}
}

// TestExternalCopyWaitsOffItsLane: a copy of an id whose first record, in
// another partition, is still being called does not hold up the later
// records of its own key; it holds its partition's offset until the first
// record is recorded, then counts as a duplicate.
func TestExternalCopyWaitsOffItsLane(t *testing.T) {
	e := newEnv(t, withPartitions(2))
	e.dumpLogsOnFailure(t)
	id, later := newID(t), newID(t)
	first, copyKey := keyOn(0, 2, "first"), keyOn(1, 2, "copy")
	e.kafka.Produce(t, e.topic, keyed(id, 0, first, 1))
	release := make(chan struct{})
	calledFirst, calledLater := make(chan struct{}), make(chan struct{})
	x := newXRecorder(t, time.Millisecond)
	x.before = func(ctx context.Context, ev *consumer.Event) error {
		switch ev.ID {
		case id:
			close(calledFirst)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		case later:
			close(calledLater)
		}
		return nil
	}
	e.startExternal(e.config(), x.handle)
	<-calledFirst
	e.kafka.Produce(t, e.topic, keyed(id, 1, copyKey, 1), keyed(later, 1, copyKey, 2))
	select {
	case <-calledLater:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("the record after the copy under the copy's key was not called while the first record's call ran")
	}
	time.Sleep(300 * time.Millisecond) // several BatchWaits
	co, err := e.committed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if co[1] > 0 {
		t.Fatalf("partition 1 committed offset %d past the copy while its first record was not recorded", co[1])
	}
	e.waitCaughtUp(t, 30*time.Second)
	calls, bad := x.snapshot()
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	if calls[id] != 1 || calls[later] != 1 {
		t.Fatalf("calls: first id %d, later id %d; want 1 each", calls[id], calls[later])
	}
	if rows, distinct := e.dedupRows(t); rows != 2 || distinct != 2 {
		t.Fatalf("%d dedup rows (%d distinct), want 2", rows, distinct)
	}
}
