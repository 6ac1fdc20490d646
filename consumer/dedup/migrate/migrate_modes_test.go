package migrate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/dedup/migrate"
)

// TestMigrateIntoNewNameWithSyncTrigger migrates a legacy table with a
// consumer group column and a composite key into a table of another name
// (created by the "operator" first), with the sync trigger keeping up with
// writers that still use the legacy table.
func TestMigrateIntoNewNameWithSyncTrigger(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	exec(t, pool, `CREATE SCHEMA app`)
	exec(t, pool, `CREATE TABLE app.seen_events (
		id uuid NOT NULL,
		grp varchar(200) NOT NULL,
		seen timestamp NOT NULL DEFAULT now(),
		PRIMARY KEY (id, grp))`)
	rows := population(now, 4, 40, "billing", "audit")
	for _, r := range rows {
		exec(t, pool, `INSERT INTO app.seen_events (id, grp, seen) VALUES ($1, $2, $3)`, r.id, r.group, now.Add(-time.Hour))
	}
	tbl := dedup.Table{Schema: "dedup", Name: "processed_event", Scope: dedup.ScopeConsumerGroup, Interval: dedup.Daily}
	// The operator got there first: the table exists with its marker.
	eng, err := dedup.NewEngine(pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Maintain(ctx, now, 4, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	cfg := migrate.Config{
		Table: tbl, Premake: 4, Retention: 48 * time.Hour, // Owner: taken from the existing table
		LegacySchema: "app", Legacy: "seen_events", IDColumn: "id", GroupColumn: "grp", ProcessedAtColumn: "seen",
		BatchSize: 7, SyncTrigger: true, Now: func() time.Time { return now },
	}
	rep, err := migrate.Run(ctx, pool, cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	in, _ := classify(rows, rep.Window)
	if rep.Renamed || rep.Created || rep.Eligible != int64(len(in)) || rep.Copied != int64(len(in)) || rep.Missing != 0 ||
		rep.Skipped[migrate.SkipNotV7] != 100 || rep.Skipped[migrate.SkipTooNew] != 20 || rep.Skipped[migrate.SkipTooOld] != count(rows, "old") {
		t.Fatalf("report: %+v (want %d in-window rows)", rep, len(in))
	}
	assertDuplicates(t, pool, tbl, "billing", in)
	assertDuplicates(t, pool, tbl, "audit", in)
	if n := scalar[int64](t, pool, `SELECT count(*) FROM dedup.processed_event WHERE processed_at <> $1`, now.Add(-time.Hour)); n != 0 {
		t.Errorf("%d rows lost their processing time", n)
	}

	// Writers of the legacy table carry on; the trigger copies what they insert.
	late := idAt(time.Now())
	exec(t, pool, `INSERT INTO app.seen_events (id, grp) VALUES ($1, 'billing'), ($2, 'billing'), ($3, 'billing')`,
		late, uuid.New(), idAt(now.Add(-30*24*time.Hour)))
	if n := scalar[int64](t, pool, `SELECT count(*) FROM dedup.processed_event WHERE event_id = $1 AND consumer_group = 'billing'`, late); n != 1 {
		t.Errorf("the sync trigger did not copy a new legacy row (%d)", n)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM dedup.processed_event`); n != int64(len(in))+1 {
		t.Errorf("the sync trigger copied ids outside the window or not v7: %d rows, want %d", n, len(in)+1)
	}
	// A re-run finds everything in place.
	again, err := migrate.Run(ctx, pool, cfg)
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if again.Copied != 0 || again.Eligible != int64(len(in))+1 || again.Missing != 0 {
		t.Errorf("re-run: %+v", again)
	}

	// Removing the trigger stops the copying, and is idempotent.
	for range 2 {
		if err := migrate.RemoveSyncTrigger(ctx, pool, cfg); err != nil {
			t.Fatalf("RemoveSyncTrigger: %v", err)
		}
	}
	after := idAt(time.Now())
	exec(t, pool, `INSERT INTO app.seen_events (id, grp) VALUES ($1, 'billing')`, after)
	if n := scalar[int64](t, pool, `SELECT count(*) FROM dedup.processed_event WHERE event_id = $1`, after); n != 0 {
		t.Error("rows are still copied after RemoveSyncTrigger")
	}
}

// TestMigrateGlobalScope keeps one dedup row per id when the legacy table
// recorded an id for several groups.
func TestMigrateGlobalScope(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	exec(t, pool, `CREATE TABLE processed_event (event_id uuid NOT NULL, consumer_group text NOT NULL, PRIMARY KEY (event_id, consumer_group))`)
	rows := population(now, 2, 30, "a", "b")
	for _, r := range rows {
		exec(t, pool, `INSERT INTO processed_event VALUES ($1, $2)`, r.id, r.group)
	}
	tbl := dedup.Table{Scope: dedup.ScopeGlobal, Interval: dedup.Hourly}
	rep, err := migrate.Run(ctx, pool, migrate.Config{Table: tbl, Owner: owner, Premake: 3, Retention: 96 * time.Hour, BatchSize: 5, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := classify(rows, rep.Window)
	if rep.Eligible != int64(len(in)) || rep.Copied != int64(len(in)/2) || rep.Missing != 0 {
		t.Errorf("report: %+v, want %d eligible rows and %d copied", rep, len(in), len(in)/2)
	}
	assertDuplicates(t, pool, tbl, "c", in)
}

// TestMigrateResumesAfterRename: a run interrupted after the rename (here:
// the rename done by hand) is finished by the next one.
func TestMigrateResumesAfterRename(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	exec(t, pool, `CREATE TABLE processed_event (event_id uuid PRIMARY KEY)`)
	rows := population(now, 2, 20, "g")
	for _, r := range rows {
		exec(t, pool, `INSERT INTO processed_event VALUES ($1)`, r.id)
	}
	exec(t, pool, `ALTER TABLE processed_event RENAME TO processed_event_legacy`)
	exec(t, pool, `ALTER INDEX processed_event_pkey RENAME TO processed_event_legacy_pkey`)
	tbl := dedup.Table{}
	rep, err := migrate.Run(ctx, pool, migrate.Config{Table: tbl, Owner: owner, Group: "g", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := classify(rows, rep.Window)
	if rep.Renamed || !rep.Created || rep.Copied != int64(len(in)) {
		t.Errorf("report: %+v", rep)
	}
	assertDuplicates(t, pool, tbl, "g", in)
}

// TestMigrateOverrideGroup records every row under a new group id and the
// copy time, ignoring the legacy table's group and time columns ("-").
func TestMigrateOverrideGroup(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	exec(t, pool, `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, consumer_group text, processed_at timestamptz)`)
	rows := population(now, 1, 10, "renamed-group")
	for _, r := range rows {
		exec(t, pool, `INSERT INTO processed_event VALUES ($1, 'old-group', '2001-01-01')`, r.id)
	}
	tbl := dedup.Table{}
	rep, err := migrate.Run(ctx, pool, migrate.Config{Table: tbl, Owner: owner, Group: "renamed-group",
		GroupColumn: "-", ProcessedAtColumn: "-", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := classify(rows, rep.Window)
	assertDuplicates(t, pool, tbl, "renamed-group", in)
	if n := scalar[int64](t, pool, `SELECT count(*) FROM processed_event WHERE consumer_group <> 'renamed-group' OR processed_at < now() - interval '1 hour'`); n != 0 {
		t.Errorf("%d rows kept the legacy group or time", n)
	}
}

func TestMigrateRefusals(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	exec(t, pool, `CREATE TABLE text_ids (event_id text PRIMARY KEY)`)
	exec(t, pool, `CREATE TABLE no_group (event_id uuid PRIMARY KEY)`)
	exec(t, pool, `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, consumer_group text)`)
	other, err := dedup.NewEngine(pool, dedup.Table{Name: "claimed"})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.EnsureTable(ctx, "someone-else"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  migrate.Config
		want string
	}{
		{"id not uuid", migrate.Config{Table: dedup.Table{Name: "t1"}, Legacy: "text_ids", Owner: owner, Group: "g"}, "is text, not uuid"},
		{"no group", migrate.Config{Table: dedup.Table{Name: "t2"}, Legacy: "no_group", Owner: owner}, "no consumer group column"},
		{"no owner", migrate.Config{}, "metadata.uid"},
		{"another owner", migrate.Config{Table: dedup.Table{Name: "claimed"}, Legacy: "no_group", Owner: owner, Group: "g"}, "someone-else"},
		{"unmarked target", migrate.Config{Table: dedup.Table{Name: "text_ids"}, Legacy: "no_group", Owner: owner, Group: "g"}, "text_ids"},
		{"missing legacy", migrate.Config{Legacy: "nope", Owner: owner}, "missing"},
		{"sync trigger in place", migrate.Config{Owner: owner, SyncTrigger: true}, "keep its name"},
		{"hostile rename", migrate.Config{Owner: owner, RenameTo: `x"; DROP TABLE no_group; --`}, "rename-to"},
		{"bad group", migrate.Config{Owner: owner, Group: "a'b"}, "not a Kafka consumer group id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := migrate.Run(ctx, pool, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if relkind(t, pool, "no_group") != "r" || relkind(t, pool, "processed_event") != "r" {
		t.Fatal("a refused migration changed a table")
	}

	// A writer holding the legacy table makes the rename give up quickly,
	// leaving everything as it was.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO processed_event VALUES ($1, 'g')`, idAt(time.Now())); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = migrate.Run(ctx, pool, migrate.Config{Owner: owner, RenameLockTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Run with the legacy table locked = %v, want an 'in use' error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the rename waited %v", d)
	}
	_ = tx.Rollback(ctx)
	if relkind(t, pool, "processed_event") != "r" || relkind(t, pool, "processed_event_legacy") != "" {
		t.Error("the failed rename left a change behind")
	}
}
