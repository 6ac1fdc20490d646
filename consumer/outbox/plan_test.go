package outbox_test

import (
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRelay_ALoneEventDoesNotScanThePublishedRows: with 50,000 published
// rows in the partition, a relay that publishes lone events one after
// another reads a handful of index entries per event. Its statements are
// prepared (pgx's statement cache); after five executions PostgreSQL may
// switch to a generic plan, which for the window's bounds ("the smallest
// event_id with tx in [lo, hi)") walked the primary key from the oldest row
// and filtered on tx: every published row on every window (21 ms at 50,000
// rows; the benchmark's p50 was 54 ms at 50 events/s). A custom plan does the
// same while the table has no statistics on tx. The window's rows are now
// found through the tx index first.
func TestRelay_ALoneEventDoesNotScanThePublishedRows(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	const published, lone = 50000, 12
	for range published / 500 {
		if _, err := e.pool.Exec(ctx, `SELECT count(`+e.tbl.EmitFunction()+`('orders', convert_to('k' || g % 1000, 'UTF8'), NULL)) FROM generate_series(1, 500) g`); err != nil {
			t.Fatal(err)
		}
	}
	// Published already: the cursor skips them (no relay has read them).
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := outbox.ResetCursor(ctx, conn, e.tbl, nil); err != nil {
		t.Fatal(err)
	}
	// The statistics before the relay: this session's own flush is forced.
	var before int64
	idxRead := `SELECT coalesce(sum(s.idx_tup_read), 0)::int8 FROM pg_stat_all_indexes s
  JOIN pg_inherits i ON i.inhrelid = s.relid WHERE i.inhparent = 'public.outbox'::regclass`
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, idxRead).Scan(&before); err != nil {
		t.Fatal(err)
	}

	r := e.start(t, func(c *outbox.Config) { c.ConnConfig.RuntimeParams["application_name"] = "plan-test-relay" })
	waitFor(t, 10*time.Second, "the relay to own the stream", r.owner)
	for i := range lone {
		e.emit(t, "orders", "lone", nil)
		waitFor(t, 10*time.Second, "the lone event's publish", func() bool { return testutil.ToFloat64(r.metrics.Published) == float64(i+1) })
	}
	// A backend flushes its statistics when it exits: stop the relay and
	// wait for its session to end.
	r.stop()
	waitFor(t, 10*time.Second, "the relay's session to end", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'plan-test-relay'`).Scan(&n)
		return err == nil && n == 0
	})
	var after int64
	waitFor(t, 10*time.Second, "the statistics", func() bool {
		_, _ = conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
		return conn.QueryRow(ctx, idxRead).Scan(&after) == nil && after > before
	})
	time.Sleep(time.Second) // a late flush adds, never removes
	_, _ = conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
	if err := conn.QueryRow(ctx, idxRead).Scan(&after); err != nil {
		t.Fatal(err)
	}
	read := after - before
	t.Logf("index entries read for %d lone events over %d published rows: %d", lone, published, read)
	if read > published/2 {
		t.Fatalf("the relay read %d index entries for %d lone events: it scans the %d published rows (a generic plan)", read, lone, published)
	}
}
