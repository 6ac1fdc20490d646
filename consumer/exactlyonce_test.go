package consumer_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestExactlyOnceWithDuplicates: a stream in which ids repeat at other
// offsets of the same partition and on other partitions, consumed, then
// replayed from the start after an offset reset, leaves one effect per id.
func TestExactlyOnceWithDuplicates(t *testing.T) {
	e := newEnv(t, withPartitions(4))
	e.dumpLogsOnFailure(t)
	const unique = 400
	ids := make([]uuid.UUID, unique)
	var msgs []kafka.Message
	for i := range ids {
		ids[i] = newID(t)
		msgs = append(msgs, event(ids[i], i%4, ""))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 600 { // duplicates: same id, random partition, later offset
		id := ids[rng.IntN(unique)]
		msgs = append(msgs, event(id, rng.IntN(4), `,"dup":true`))
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	e.kafka.Produce(t, e.topic, msgs...)

	r := e.start(e.config(), nil)
	e.waitCaughtUp(t, 60*time.Second)
	if rows, distinct := e.effects(t); rows != unique || distinct != unique {
		t.Fatalf("after first pass: %d effect rows, %d distinct ids; want %d and %d", rows, distinct, unique, unique)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// Offset reset: the group starts over from the beginning of every
	// partition (a fresh group id would also be a fresh dedup scope, so the
	// same group is reset instead).
	resetOffsets(t, e, 0)
	calls := e.calls.Load()
	r = e.start(e.config(), nil)
	e.waitCaughtUp(t, 60*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if rows, distinct := e.effects(t); rows != unique || distinct != unique {
		t.Fatalf("after replay: %d effect rows, %d distinct ids; want %d and %d", rows, distinct, unique, unique)
	}
	if n := e.calls.Load() - calls; n != 0 {
		t.Fatalf("handler ran %d times during the replay, want 0", n)
	}
}

// resetOffsets commits offset to every partition of the group while no
// member is active, as kafka-consumer-groups --reset-offsets does.
func resetOffsets(t testing.TB, e *env, offset int64) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(e.kafka.Brokers()...), Timeout: 10 * time.Second}
	var commits []kafka.OffsetCommit
	for p := range e.parts {
		commits = append(commits, kafka.OffsetCommit{Partition: p, Offset: offset})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The group may take a moment to become empty after the last member left.
	for {
		resp, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{
			GroupID: e.group, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{e.topic: commits},
		})
		if err == nil {
			var perr error
			for _, p := range resp.Topics[e.topic] {
				if p.Error != nil {
					perr = p.Error
				}
			}
			if perr == nil {
				co, _ := e.committed(ctx)
				for p := range e.parts {
					if co[p] != offset {
						t.Fatalf("offset reset did not take: %v", co)
					}
				}
				return
			}
			err = perr
		}
		if ctx.Err() != nil {
			t.Fatalf("resetting offsets: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCrashBetweenCommits: the process dies after the database commit and
// before the offset commit. The restarted consumer gets the batch again and
// the dedup rows make it a no-op: every id has one effect and the handler
// ran once per id over both runs.
func TestCrashBetweenCommits(t *testing.T) {
	e := newEnv(t, withPartitions(2))
	e.dumpLogsOnFailure(t)
	const n = 300
	var msgs []kafka.Message
	for i := range n {
		msgs = append(msgs, event(newID(t), i%2, ""))
	}
	e.kafka.Produce(t, e.topic, msgs...)

	crash := errors.New("simulated crash between database commit and offset commit")
	var crashed atomic.Bool
	var crashPartition atomic.Int64
	r := e.start(e.config(func(c *consumer.Config) { c.BatchSize = 50 }), nil, func(c *consumer.Consumer) {
		consumer.SetAfterDBCommitHook(c, func(partition int, next int64) error {
			if next >= 100 && crashed.CompareAndSwap(false, true) {
				crashPartition.Store(int64(partition))
				return crash
			}
			return nil
		})
	})
	if err := r.wait(t, 60*time.Second); !errors.Is(err, crash) {
		t.Fatalf("Run returned %v, want the crash", err)
	}
	co, err := e.committed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := e.effects(t)
	var committedTotal int64
	for _, off := range co {
		committedTotal += max(off, 0)
	}
	if int64(rows) <= committedTotal {
		t.Fatalf("expected the crashed batch in the database but not committed: %d rows, committed offsets %v", rows, co)
	}
	t.Logf("at the crash: %d effect rows, committed offsets %v (partition %d crashed)", rows, co, crashPartition.Load())

	callsBefore := e.calls.Load()
	r = e.start(e.config(), nil)
	e.waitCaughtUp(t, 60*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if rows, distinct := e.effects(t); rows != n || distinct != n {
		t.Fatalf("%d effect rows, %d distinct; want %d", rows, distinct, n)
	}
	if total := e.calls.Load(); total != n {
		t.Fatalf("handler succeeded %d times over both runs (%d before the restart), want %d", total, callsBefore, n)
	}
}

// TestGracefulShutdown: stopping mid-stream finishes the batch in flight and
// commits it, so that afterwards the committed offset covers exactly the
// events that have effects.
func TestGracefulShutdown(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const n = 2000
	var msgs []kafka.Message
	for range n {
		msgs = append(msgs, event(newID(t), 0, ""))
	}
	e.kafka.Produce(t, e.topic, msgs...)
	slow := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		time.Sleep(200 * time.Microsecond)
		return e.handler(ctx, tx, ev)
	}
	r := e.start(e.config(func(c *consumer.Config) { c.BatchSize = 20 }), slow)
	waitFor(t, 30*time.Second, "some progress", func() (bool, string) { return e.calls.Load() > 100, "" })
	start := time.Now()
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("shutdown took %v", time.Since(start))
	co, err := e.committed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := e.effects(t)
	if int64(rows) != co[0] {
		t.Fatalf("after shutdown: %d effect rows but committed offset %d; the batch in flight was not finished and committed", rows, co[0])
	}
	if rows >= n {
		t.Fatalf("all %d events processed before the stop; the test proves nothing", n)
	}
	t.Logf("stopped after %d of %d events, offset committed at %d", rows, n, co[0])
}
