package outbox_test

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// v7At is a UUID v7 stamped at ts.
func v7At(ts time.Time) uuid.UUID {
	u := dedup.BoundaryUUID(ts)
	_, _ = rand.Read(u[6:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

// TestRetention_DropsOnlyPublishedPartitions: two partitions past the
// retention, one whose rows the relay has published and one with a row it
// has not: Maintain drops the first and keeps the second, and drops it once
// the relay has published it.
func TestRetention_DropsOnlyPublishedPartitions(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	now := time.Now().UTC()
	day := dedup.Daily.Floor(now.Add(-10 * 24 * time.Hour))
	if _, err := outbox.Maintain(ctx, e.pool, e.tbl, day, 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	published, pending := dedup.PartitionName("outbox", dedup.Daily, day), dedup.PartitionName("outbox", dedup.Daily, day.Add(24*time.Hour))
	insert := func(ts time.Time) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, `INSERT INTO outbox (event_id, topic, key, payload) VALUES ($1, 'orders', 'k', 'p')`, v7At(ts)); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		var ok bool
		if err := e.pool.QueryRow(ctx, `SELECT to_regclass('public.' || $1) IS NOT NULL`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	insert(day.Add(time.Hour))
	insert(day.Add(2 * time.Hour))
	// The published count moves once the broker acknowledged a row, the
	// cursor (which the drop guard and a restarted relay read) a moment
	// later: wait for the cursor, read as the backlog metric reads it.
	unpublished := func() int {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox o, outbox_relay c
 WHERE o.tx >= c.lo AND (o.tx >= c.hi OR c.after IS NULL OR o.event_id > c.after)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	r := e.start(t, nil)
	waitFor(t, 20*time.Second, "two rows published", func() bool { return testutil.ToFloat64(r.metrics.Published) >= 2 })
	waitFor(t, 20*time.Second, "the cursor past both rows", func() bool { return unpublished() == 0 })
	r.stop()
	insert(day.Add(25 * time.Hour)) // in the next day's partition, not published: the relay is stopped

	res, err := outbox.Maintain(ctx, e.pool, e.tbl, now, 2, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dropped %v", res.Dropped)
	if exists(published) {
		t.Errorf("%s (every row published, past retention) was kept", published)
	}
	if !exists(pending) {
		t.Fatalf("%s (a row not published) was dropped", pending)
	}

	r = e.start(t, nil)
	waitFor(t, 20*time.Second, "the last row published", func() bool { return testutil.ToFloat64(r.metrics.Published) >= 1 })
	waitFor(t, 20*time.Second, "the cursor past the last row", func() bool { return unpublished() == 0 })
	if _, err := outbox.Maintain(ctx, e.pool, e.tbl, now, 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	if exists(pending) {
		t.Errorf("%s was kept after its row was published", pending)
	}
	if got := e.readTopic(t, "orders", 1, 3, 10*time.Second); len(got) != 3 {
		t.Errorf("published %d records, want 3", len(got))
	}
}

// TestMaintain_RefusesATableOfTheOtherKind: the partition engine keeps both
// kinds of table, and neither kind's Maintain touches the other's table.
func TestMaintain_RefusesATableOfTheOtherKind(t *testing.T) {
	ctx := testCtx(t)
	pool, tbl := newOutbox(t)
	eng, err := dedup.NewEngine(pool, dedup.Table{Name: tbl.Name, Scope: dedup.ScopeGlobal})
	if err != nil {
		t.Fatal(err)
	}
	var le *dedup.LayoutError
	if _, err := eng.Maintain(ctx, time.Now(), 2, 48*time.Hour); !errors.As(err, &le) {
		t.Errorf("dedup Maintain on an outbox: %v, want a *dedup.LayoutError", err)
	}
	d, err := dedup.NewEngine(pool, dedup.Table{Name: "processed_event"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Maintain(ctx, pool, outbox.Table{Name: "processed_event"}, time.Now(), 2, 48*time.Hour); !errors.As(err, &le) {
		t.Errorf("outbox Maintain on a dedup table: %v, want a *dedup.LayoutError", err)
	}
	if err := outbox.Ensure(ctx, pool, outbox.Table{Name: "processed_event"}, testOwner); !errors.As(err, &le) {
		t.Errorf("outbox Ensure on a dedup table: %v, want a *dedup.LayoutError", err)
	}
}

// TestRetention_KeepsAPartitionWithARowStillBeingCommitted (review finding
// L2): a transaction that inserted into an expired partition is still open
// when maintenance looks. The guard sees no committed unpublished row, but
// DETACH ... CONCURRENTLY waits for that transaction, whose row then
// commits into the partition being dropped: it must be kept (and the row
// published), not dropped with it.
func TestRetention_KeepsAPartitionWithARowStillBeingCommitted(t *testing.T) {
	ctx := testCtx(t)
	pool, tbl := newOutbox(t)
	now := time.Now().UTC()
	day := dedup.Daily.Floor(now.Add(-10 * 24 * time.Hour))
	if _, err := outbox.Maintain(ctx, pool, tbl, day, 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	// The oldest partition: the first maintenance detaches (a later one's
	// guard runs after an earlier DETACH CONCURRENTLY waited for every
	// older transaction).
	var name string
	if err := pool.QueryRow(ctx, `SELECT min(inhrelid::regclass::text) FROM pg_inherits WHERE inhparent = 'public.outbox'::regclass`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	first, err := time.Parse("20060102", name[len("outbox_p"):])
	if err != nil {
		t.Fatal(err)
	}
	// The cursor at the horizon: everything committed so far is published.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.ResetCursor(ctx, conn.Conn(), tbl, nil); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback(ctx) }()
	if _, err := open.Exec(ctx, `INSERT INTO outbox (event_id, topic, key, payload) VALUES ($1, 'orders', 'k', 'late')`, v7At(first.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		res, err := outbox.Maintain(ctx, pool, tbl, now, 2, 48*time.Hour)
		t.Logf("maintain: dropped %v, finalized %v", res.Dropped, res.Finalized)
		done <- err
	}()
	// Maintenance comes to the partition and waits for the transaction
	// (DETACH ... CONCURRENTLY, or the guard itself).
	var waiting string
	for deadline := time.Now().Add(20 * time.Second); waiting == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(query, '; '), '') FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("maintenance waits in: %s", waiting)
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	t.Logf("maintain: %v", err)
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('public.' || $1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("%s was dropped with a committed row the relay never published", name)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE payload = 'late'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the late row through the outbox: %d, %v; want 1 (the partition attached)", n, err)
	}
}
