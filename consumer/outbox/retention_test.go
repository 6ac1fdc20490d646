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
