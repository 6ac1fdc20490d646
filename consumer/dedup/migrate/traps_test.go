package migrate_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/dedup/migrate"
)

// cancelAfter is a slog handler that cancels a context when it has seen
// msg n times: an interrupt at a known point of the copy.
type cancelAfter struct {
	msg    string
	n      int64
	seen   *atomic.Int64
	cancel context.CancelFunc
}

func (h cancelAfter) Enabled(context.Context, slog.Level) bool { return true }
func (h cancelAfter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg && h.seen.Add(1) == h.n {
		h.cancel()
	}
	return nil
}
func (h cancelAfter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h cancelAfter) WithGroup(string) slog.Handler      { return h }

// legacyEvents creates app_events (event_id, processed_at) with n ids
// inside the last day, and returns the target table for them.
func legacyEvents(t *testing.T, pool *pgxpool.Pool, now time.Time, n int) dedup.Table {
	t.Helper()
	exec(t, pool, `CREATE TABLE app_events (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())`)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = idAt(now.Add(-time.Duration(i) * 24 * time.Hour / time.Duration(n))).String()
	}
	exec(t, pool, `INSERT INTO app_events (event_id) SELECT unnest($1::uuid[])`, ids)
	return dedup.Table{Name: "processed_event", Scope: dedup.ScopeConsumerGroup, Interval: dedup.Daily}
}

// TestMigrateInterruptedReportsTrueCounts: an interrupted copy says so, and
// its counts are what the new table holds, not the totals of a finished run.
func TestMigrateInterruptedReportsTrueCounts(t *testing.T) {
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	tbl := legacyEvents(t, pool, now, 2000)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	cfg := migrate.Config{
		Table: tbl, Owner: owner, Group: "orders", Legacy: "app_events", BatchSize: 200,
		Now:    func() time.Time { return now },
		Logger: slog.New(cancelAfter{msg: "batch copied", n: 3, seen: new(atomic.Int64), cancel: cancel}),
	}
	rep, err := migrate.Run(ctx, pool, cfg)
	if err == nil || rep == nil {
		t.Fatalf("interrupted run: report %v, err %v; want a report and the interruption", rep, err)
	}
	var out bytes.Buffer
	rep.Write(&out)
	t.Logf("report of the interrupted run:\n%s", out.String())
	inTable := scalar[int64](t, pool, `SELECT count(*) FROM processed_event`)
	if inTable == 0 || inTable >= 2000 {
		t.Fatalf("the interrupt came at the wrong time: %d rows copied", inTable)
	}
	text := out.String()
	if !strings.Contains(text, "INTERRUPTED") {
		t.Errorf("the report does not say the run was interrupted:\n%s", text)
	}
	if !strings.Contains(text, fmt.Sprintf("in public.processed_event now: %d;", inTable)) ||
		!strings.Contains(text, fmt.Sprintf("still missing: %d", 2000-inTable)) {
		t.Errorf("the report's counts are not the table's (%d of 2000 rows copied):\n%s", inTable, text)
	}
	if strings.Contains(text, "verification: 0 eligible rows missing") {
		t.Errorf("the report claims a complete copy:\n%s", text)
	}
	// A re-run finishes the copy.
	cfg.Logger = nil
	again, err := migrate.Run(testCtx(t), pool, cfg)
	if err != nil || again.Missing != 0 || scalar[int64](t, pool, `SELECT count(*) FROM processed_event`) != 2000 {
		t.Fatalf("re-run: %+v, %v", again, err)
	}
}

// TestMigrateShorterRetentionRefused: a re-run whose retention would drop
// partitions that hold migrated rows changes nothing, and says how to
// confirm.
func TestMigrateShorterRetentionRefused(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	exec(t, pool, `CREATE TABLE app_events (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())`)
	for d := range 7 {
		exec(t, pool, `INSERT INTO app_events (event_id) VALUES ($1)`, idAt(now.Add(-time.Duration(d)*24*time.Hour-time.Hour)))
	}
	tbl := dedup.Table{Name: "processed_event", Scope: dedup.ScopeConsumerGroup, Interval: dedup.Daily}
	cfg := migrate.Config{Table: tbl, Owner: owner, Group: "orders", Legacy: "app_events", Retention: 168 * time.Hour,
		Now: func() time.Time { return now }}
	if _, err := migrate.Run(ctx, pool, cfg); err != nil {
		t.Fatal(err)
	}
	rows := scalar[int64](t, pool, `SELECT count(*) FROM processed_event`)
	parts := scalar[int64](t, pool, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'processed_event'::regclass`)

	shorter := cfg
	shorter.Retention = 72 * time.Hour
	for _, dry := range []bool{true, false} {
		shorter.DryRun = dry
		rep, err := migrate.Run(ctx, pool, shorter)
		after := scalar[int64](t, pool, `SELECT count(*) FROM processed_event`)
		if err == nil || !strings.Contains(err.Error(), "--confirm-partition-drop") || after != rows {
			t.Errorf("re-run (dry run %v) with a shorter retention: err %v, rows %d -> %d; want a refusal naming --confirm-partition-drop that drops nothing", dry, err, rows, after)
		}
		if rep != nil {
			var out bytes.Buffer
			rep.Write(&out)
			t.Logf("report:\n%s", out.String())
		}
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'processed_event'::regclass`); n != parts {
		t.Errorf("partitions %d -> %d", parts, n)
	}

	// Confirmed, the partitions older than the retention go, and the
	// report names them.
	shorter.DryRun, shorter.ConfirmPartitionDrop = false, true
	rep, err := migrate.Run(ctx, pool, shorter)
	if err != nil {
		t.Fatalf("confirmed: %v", err)
	}
	after := scalar[int64](t, pool, `SELECT count(*) FROM processed_event`)
	if len(rep.PartitionsDropped) == 0 || after >= rows || after == 0 {
		t.Errorf("confirmed: dropped %v, rows %d -> %d", rep.PartitionsDropped, rows, after)
	}
	var out bytes.Buffer
	rep.Write(&out)
	if !strings.Contains(out.String(), "partitions dropped (older than the retention)") {
		t.Errorf("the report does not name the dropped partitions:\n%s", out.String())
	}
	// Empty partitions past the retention need no confirmation.
	shorter.ConfirmPartitionDrop = false
	shorter.Retention = 48 * time.Hour
	exec(t, pool, `DELETE FROM processed_event WHERE event_id < $1`, dedup.BoundaryUUID(now.Add(-48*time.Hour).Truncate(24*time.Hour)))
	if _, err := migrate.Run(ctx, pool, shorter); err != nil {
		t.Errorf("dropping empty partitions: %v", err)
	}
}

// TestMigrateSyncTriggerLockTimeout: installing the sync trigger behind an
// open write transaction on the legacy table gives up within its lock
// timeout (retrying a few times), and legacy inserts meanwhile never wait
// longer than that timeout.
func TestMigrateSyncTriggerLockTimeout(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	tbl := legacyEvents(t, pool, now, 10)
	const lockTimeout = time.Second

	// A writer with a transaction open for 8 s.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `INSERT INTO app_events (event_id) VALUES ($1)`, idAt(now)); err != nil {
		t.Fatal(err)
	}
	holdDone := make(chan struct{})
	go func() {
		defer close(holdDone)
		time.Sleep(8 * time.Second)
		_ = holder.Rollback(context.Background())
	}()

	// Other writers keep inserting; each insert's wait is measured.
	var (
		mu      sync.Mutex
		maxWait time.Duration
		inserts int
	)
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			start := time.Now()
			if _, err := pool.Exec(ctx, `INSERT INTO app_events (event_id) VALUES ($1)`, idAt(time.Now())); err != nil {
				t.Errorf("legacy insert: %v", err)
				return
			}
			mu.Lock()
			maxWait, inserts = max(maxWait, time.Since(start)), inserts+1
			mu.Unlock()
		}
	}()

	cfg := migrate.Config{Table: tbl, Owner: owner, Group: "orders", Legacy: "app_events", SyncTrigger: true,
		LockTimeout: lockTimeout, LockAttempts: 3, Now: func() time.Time { return now }}
	start := time.Now()
	_, err = migrate.Run(ctx, pool, cfg)
	took := time.Since(start)
	close(stop)
	<-writerDone
	<-holdDone
	mu.Lock()
	defer mu.Unlock()
	t.Logf("Run returned after %s: %v; %d legacy inserts meanwhile, the longest waited %s", took.Round(time.Millisecond), err, inserts, maxWait.Round(time.Millisecond))
	if err == nil || took >= 8*time.Second {
		t.Errorf("the sync trigger waited %s for the open transaction (err %v); want it to give up within its lock timeout and retries", took.Round(time.Millisecond), err)
	}
	if maxWait > lockTimeout+400*time.Millisecond {
		t.Errorf("a legacy insert waited %s behind the trigger's DDL; want at most the lock timeout %s", maxWait.Round(time.Millisecond), lockTimeout)
	}
}

// TestMigrateReportsLeftoverSyncTrigger: a re-run without SyncTrigger says
// that the trigger of an earlier run still copies legacy inserts.
func TestMigrateReportsLeftoverSyncTrigger(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	tbl := legacyEvents(t, pool, now, 10)
	cfg := migrate.Config{Table: tbl, Owner: owner, Group: "orders", Legacy: "app_events", SyncTrigger: true,
		Now: func() time.Time { return now }}
	if _, err := migrate.Run(ctx, pool, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.SyncTrigger = false
	rep, err := migrate.Run(ctx, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Write(&out)
	if !strings.Contains(out.String(), "still installed") || !strings.Contains(out.String(), "--remove-sync-trigger") {
		t.Errorf("the re-run does not report the sync trigger left in place:\n%s", out.String())
	}
	if err := migrate.RemoveSyncTrigger(ctx, pool, cfg); err != nil {
		t.Fatal(err)
	}
	rep, err = migrate.Run(ctx, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	rep.Write(&out)
	if strings.Contains(out.String(), "sync trigger") {
		t.Errorf("a removed trigger is reported:\n%s", out.String())
	}
}
