package outbox_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestResetCursor_IsExplicit: a reset is refused while a relay owns the
// stream; with the relays stopped, a reset to an older transaction id makes
// the next relay publish those rows again (same eventId), and a reset to
// the horizon (nil) skips what is committed.
func TestResetCursor_IsExplicit(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	var first uint64
	var s string
	if err := e.pool.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if first, err = strconv.ParseUint(s, 10, 64); err != nil {
		t.Fatal(err)
	}
	id := e.emit(t, "orders", "k", []byte("once"))
	r := e.start(t, nil)
	waitFor(t, 20*time.Second, "the row published", func() bool { return testutil.ToFloat64(r.metrics.Published) == 1 })
	if _, err := outbox.ResetCursor(ctx, conn, e.tbl, &first); err == nil {
		t.Fatal("reset while a relay owns the stream succeeded")
	}
	r.stop()
	lo, err := outbox.ResetCursor(ctx, conn, e.tbl, &first)
	if err != nil || lo != first {
		t.Fatalf("reset to %d: %d, %v", first, lo, err)
	}
	r = e.start(t, nil)
	waitFor(t, 20*time.Second, "the row published again", func() bool { return testutil.ToFloat64(r.metrics.Published) == 1 })
	got := e.readTopic(t, "orders", 1, 2, 20*time.Second)
	if len(got) != 2 || got[0].id != id.String() || got[1].id != id.String() {
		t.Fatalf("records %v, want %s twice", got, id)
	}
	r.stop()

	e.emit(t, "orders", "k", []byte("skipped"))
	if _, err := outbox.ResetCursor(ctx, conn, e.tbl, nil); err != nil {
		t.Fatal(err)
	}
	r = e.start(t, nil)
	waitFor(t, 20*time.Second, "the relay to own the stream", r.owner)
	time.Sleep(time.Second)
	if got := e.readTopic(t, "orders", 1, 3, 2*time.Second); len(got) != 2 {
		t.Errorf("records after a reset to the horizon: %v, want the 2 from before", got)
	}
}

// TestRelay_RefusesACursorAheadOfTheDatabase: an outbox copied to another
// cluster with its cursor (pg_dump and restore, logical replication) has a
// cursor above the new cluster's transaction ids, and its new rows, below
// it, would never be published while the backlog read 0. The relay
// refuses to publish, counts cursor_ahead, and publishes once the cursor
// is reset. Before, it published nothing and said nothing ("published 0
// of 1; backlog=0").
func TestRelay_RefusesACursorAheadOfTheDatabase(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	// The copy: the cursor a million transactions ahead.
	if _, err := e.pool.Exec(ctx, `UPDATE public.outbox_relay
   SET lo = ((lo::text::numeric + 1000000)::text)::xid8, hi = ((hi::text::numeric + 1000000)::text)::xid8`); err != nil {
		t.Fatal(err)
	}
	id := e.emit(t, "orders", "k", []byte("after the copy"))
	r := e.start(t, nil)
	waitFor(t, 20*time.Second, "the relay to refuse the cursor", func() bool {
		return testutil.ToFloat64(r.metrics.Failures.WithLabelValues(outbox.ReasonCursorAhead)) >= 1
	})
	if n := testutil.ToFloat64(r.metrics.Published); n != 0 {
		t.Fatalf("published %v records with a cursor ahead of the database", n)
	}
	r.stop()
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var first uint64 = 1
	if _, err := outbox.ResetCursor(ctx, conn, e.tbl, &first); err != nil {
		t.Fatal(err)
	}
	r = e.start(t, nil)
	waitFor(t, 20*time.Second, "the row published after the reset", func() bool { return testutil.ToFloat64(r.metrics.Published) == 1 })
	if got := e.readTopic(t, "orders", 1, 1, 10*time.Second); len(got) != 1 || got[0].id != id.String() {
		t.Fatalf("records %v, want %s", got, id)
	}
}
