package consumer_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer"
)

// blocker is a handler's dependency that hangs, ignoring the handler's
// context, until released.
type blocker struct {
	id      uuid.UUID
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	freed   atomic.Bool // set by the test before a restart: later calls count
}

func newBlocker(t *testing.T, id uuid.UUID) *blocker {
	b := &blocker{id: id, entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(b.free)
	return b
}

// hang blocks if ev is the blocked event; it reports whether it did.
func (b *blocker) hang(ev *consumer.Event) bool {
	if ev.ID != b.id {
		return false
	}
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return true
}

func (b *blocker) free() {
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

// shutdownFixture produces three events to partition 0 and returns their ids;
// the second is the one whose handler hangs.
func shutdownFixture(t *testing.T, e *env) []uuid.UUID {
	ids := []uuid.UUID{newID(t), newID(t), newID(t)}
	e.kafka.Produce(t, e.topic, event(ids[0], 0, ""), event(ids[1], 0, ""), event(ids[2], 0, ""))
	return ids
}

// stopWithin cancels r and fails unless Run returns within d.
func stopWithin(t *testing.T, r *running, d time.Duration) {
	t.Helper()
	start := time.Now()
	r.cancel()
	if err := r.wait(t, d); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("Run returned %v after the cancel", time.Since(start).Round(time.Millisecond))
}

// assertAbandoned checks that the hung event was neither recorded nor
// committed past: the committed offset is 1 (the first event's batch), the
// event has no dedup row, and the log names it.
func assertAbandoned(t *testing.T, e *env, hung uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	co, err := e.committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if co[0] != 1 {
		t.Errorf("committed offset %d, want 1 (not past the abandoned event)", co[0])
	}
	var rows int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = $1`, hung).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("the abandoned event has %d dedup rows, want 0", rows)
	}
	if log := e.logBuf.String(); !strings.Contains(log, "abandoned") || !strings.Contains(log, hung.String()) {
		t.Errorf("no log line names the abandoned event %s", hung)
	}
}

// TestShutdown_HandlerIgnoringContext: a transactional handler that hangs,
// ignoring its context, does not keep Run from returning after the
// shutdown timeout. Its event is not recorded and the offset does not move
// past it: the next run handles it, once, even when the hung handler
// returns later.
func TestShutdown_HandlerIgnoringContext(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ids := shutdownFixture(t, e)
	b := newBlocker(t, ids[1])
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		if b.hang(ev) {
			// Released after the shutdown: a write that must never commit.
			_, _ = tx.Exec(context.Background(), `INSERT INTO effect (event_id, part, off) VALUES ($1, 0, -1)`, ev.ID)
			return nil
		}
		return e.handler(ctx, tx, ev)
	}
	const shutdown = 2 * time.Second
	cfg := e.config(func(c *consumer.Config) {
		c.BatchSize = 1
		c.ShutdownTimeout = shutdown
	})
	r := e.start(cfg, h)
	select {
	case <-b.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler of the second event was not called")
	}
	stopWithin(t, r, shutdown+5*time.Second)
	assertAbandoned(t, e, ids[1])

	// The hung handler returns now: nothing of it commits.
	b.free()
	time.Sleep(500 * time.Millisecond)

	// A restart redelivers the event.
	e.start(e.config(func(c *consumer.Config) { c.BatchSize = 1 }), nil)
	e.waitCaughtUp(t, 30*time.Second)
	assertEffectAndDedupRow(t, e, ids, []bool{true, true, true})
}

// TestShutdown_ExternalHandlerIgnoringContext: the same for an external
// handler (an HTTP call that ignores its context).
func TestShutdown_ExternalHandlerIgnoringContext(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ids := shutdownFixture(t, e)
	b := newBlocker(t, ids[1])
	var mu sync.Mutex
	calls := map[uuid.UUID]int{}
	h := func(ctx context.Context, ev *consumer.Event) error {
		// The hung call returns nil once released, after the shutdown: it
		// must not be recorded, and is not counted.
		restarted := b.freed.Load()
		if !b.hang(ev) || restarted {
			mu.Lock()
			calls[ev.ID]++
			mu.Unlock()
		}
		return nil
	}
	const shutdown = 2 * time.Second
	r := e.startExternal(e.config(func(c *consumer.Config) {
		c.ShutdownTimeout = shutdown
		c.Ordering = consumer.OrderingPartition
	}), h)
	select {
	case <-b.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler of the second event was not called")
	}
	// The first event's id is recorded and its offset committed before the stop.
	waitFor(t, 10*time.Second, "the first offset committed", func() (bool, string) {
		co, err := e.committed(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return co[0] == 1, ""
	})
	stopWithin(t, r, shutdown+5*time.Second)
	assertAbandoned(t, e, ids[1])
	b.freed.Store(true)
	b.free()
	time.Sleep(500 * time.Millisecond)

	r2 := e.startExternal(e.config(func(c *consumer.Config) { c.Ordering = consumer.OrderingPartition }), h)
	e.waitCaughtUp(t, 30*time.Second)
	_ = r2
	mu.Lock()
	defer mu.Unlock()
	if calls[ids[1]] != 1 || calls[ids[2]] != 1 || calls[ids[0]] != 1 {
		t.Errorf("calls after the restart: %v, want each id once", calls)
	}
	if rows, distinct := e.dedupRows(t); rows != 3 || distinct != 3 {
		t.Errorf("%d dedup rows (%d distinct), want 3", rows, distinct)
	}
}
