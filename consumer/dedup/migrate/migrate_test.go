package migrate_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/dedup/migrate"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

const owner = "6a0f3c1e-2b7d-4c55-8e9a-1d2f3b4c5d6e"

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// idAt returns a UUID v7 stamped at tm with random low bits.
func idAt(tm time.Time) uuid.UUID {
	var u uuid.UUID
	if _, err := rand.Read(u[:]); err != nil {
		panic(err)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(tm.UnixMilli()))
	copy(u[:6], b[2:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(testCtx(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func scalar[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(testCtx(t), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// legacyRow is one row of a test's legacy table.
type legacyRow struct {
	id    uuid.UUID
	group string
	kind  string // "in", "old", "new", "v4": what the test expects
}

// population is a legacy table's content: v7 ids spread over the last
// `days` days, a few stamped far in the future, and some UUID v4 ids.
func population(now time.Time, days, perDay int, groups ...string) []legacyRow {
	var rows []legacyRow
	add := func(id uuid.UUID, kind string) {
		for _, g := range groups {
			rows = append(rows, legacyRow{id: id, group: g, kind: kind})
		}
	}
	for d := range days {
		for i := range perDay {
			// Spread over the day, so both sides of the window's lower bound
			// (a partition boundary) are populated.
			add(idAt(now.Add(-time.Duration(d)*24*time.Hour-time.Duration(i)*24*time.Hour/time.Duration(perDay))), "")
		}
	}
	for range 10 {
		add(idAt(now.Add(30*24*time.Hour)), "new")
	}
	for range 50 {
		add(uuid.New(), "v4")
	}
	return rows
}

// classify marks each v7 row in or out of w.
func classify(rows []legacyRow, w dedup.Window) (in, old []legacyRow) {
	for i := range rows {
		r := &rows[i]
		if r.kind == "" || r.kind == "in" || r.kind == "old" {
			switch t := dedup.EventTime(r.id); {
			case w.Contains(t):
				r.kind = "in"
				in = append(in, *r)
			case t.Before(w.From):
				r.kind = "old"
				old = append(old, *r)
			default:
				panic("a test id newer than the window: " + r.id.String())
			}
		}
	}
	return in, old
}

func count(rows []legacyRow, kind string) int64 {
	var n int64
	for _, r := range rows {
		if r.kind == kind {
			n++
		}
	}
	return n
}

// assertDuplicates inserts the ids with the runtime's dedup insert for group
// (in a transaction rolled back) and checks that every one is a duplicate.
func assertDuplicates(t *testing.T, pool *pgxpool.Pool, tbl dedup.Table, group string, rows []legacyRow) {
	t.Helper()
	ctx := testCtx(t)
	in, err := dedup.NewInserter(tbl, group)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for _, r := range rows {
		if r.group == group || tbl.Scope == dedup.ScopeGlobal {
			ids = append(ids, r.id)
		}
	}
	if len(ids) == 0 {
		t.Fatalf("no ids for group %s", group)
	}
	fresh := idAt(time.Now())
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	res, err := in.Insert(ctx, tx, append(ids, fresh))
	if err != nil {
		t.Fatalf("dedup insert: %v", err)
	}
	for i, id := range ids {
		if res.Outside[i] {
			t.Errorf("group %s: id %s (%s) is outside the window %s", group, id, dedup.EventTime(id), res.Window)
		} else if res.Fresh[i] {
			t.Errorf("group %s: id %s (%s) is fresh after the migration: its dedup record was lost", group, id, dedup.EventTime(id))
		}
	}
	if n := len(ids); !res.Fresh[n] {
		t.Errorf("a new id %s was reported as a duplicate", fresh)
	}
}

func relkind(t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	var k string
	err := pool.QueryRow(testCtx(t), `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, name).Scan(&k)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestMigrateInPlace converts a populated legacy processed_event (id primary
// key and processed_at, no group column) into the partitioned table of the
// same name: dry run first, then the run, then a re-run.
func TestMigrateInPlace(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	exec(t, pool, `CREATE TABLE processed_event (
		event_id uuid PRIMARY KEY,
		processed_at timestamptz NOT NULL DEFAULT now())`)
	exec(t, pool, `CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at)`)
	rows := population(now, 7, 60, "orders")
	for _, r := range rows {
		exec(t, pool, `INSERT INTO processed_event (event_id, processed_at) VALUES ($1, $2)`, r.id, now.Add(-time.Hour))
	}
	tbl := dedup.Table{Scope: dedup.ScopeConsumerGroup, Interval: dedup.Daily}
	cfg := migrate.Config{
		Table: tbl, Owner: owner, Group: "orders", Premake: 2, Retention: 72 * time.Hour, BatchSize: 25,
		Now: func() time.Time { return now },
	}

	// Dry run: counts, changes nothing.
	dry := cfg
	dry.DryRun = true
	drep, err := migrate.Run(ctx, pool, dry)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if k := relkind(t, pool, "processed_event"); k != "r" || relkind(t, pool, "processed_event_legacy") != "" {
		t.Fatalf("the dry run changed the tables (processed_event relkind %q)", k)
	}
	in, old := classify(rows, drep.Window)
	if len(in) == 0 || len(old) == 0 {
		t.Fatalf("population does not straddle the window %s: %d in, %d old", drep.Window, len(in), len(old))
	}
	want := map[string]int64{migrate.SkipNotV7: 50, migrate.SkipTooNew: 10, migrate.SkipTooOld: int64(len(old))}
	check := func(name string, rep *migrate.Report) {
		t.Helper()
		if rep.Rows != int64(len(rows)) || rep.Eligible != int64(len(in)) {
			t.Errorf("%s: rows %d eligible %d, want %d and %d", name, rep.Rows, rep.Eligible, len(rows), len(in))
		}
		for k, n := range want {
			if rep.Skipped[k] != n || len(rep.Samples[k]) != min(int(n), 5) {
				t.Errorf("%s: skipped %s = %d with samples %v, want %d", name, k, rep.Skipped[k], rep.Samples[k], n)
			}
		}
		if rep.Skipped[migrate.SkipInGap] != 0 {
			t.Errorf("%s: %d rows in gaps", name, rep.Skipped[migrate.SkipInGap])
		}
	}
	check("dry run", drep)
	if !drep.Renamed || !drep.Created || len(drep.PartitionsCreated) == 0 || drep.Copied != 0 {
		t.Errorf("dry run report: %+v", drep)
	}

	// The run.
	var skipped bytes.Buffer
	run := cfg
	run.Skipped = &skipped
	rep, err := migrate.Run(ctx, pool, run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	check("run", rep)
	if rep.Window != drep.Window || !slices.Equal(rep.PartitionsCreated, drep.PartitionsCreated) {
		t.Errorf("the run made window %s and partitions %v; the dry run predicted %s and %v", rep.Window, rep.PartitionsCreated, drep.Window, drep.PartitionsCreated)
	}
	if !rep.Renamed || !rep.Created || rep.Copied != int64(len(in)) || rep.Missing != 0 || rep.Source != "public.processed_event_legacy" {
		t.Errorf("run report: %+v", rep)
	}
	slices.Sort(rep.RenamedIndexes)
	wantIdx := []string{"processed_event_pkey -> processed_event_legacy_pkey", "processed_event_processed_at_idx -> processed_event_legacy_processed_at_idx"}
	if !slices.Equal(rep.RenamedIndexes, wantIdx) {
		t.Errorf("renamed indexes %v, want %v", rep.RenamedIndexes, wantIdx)
	}
	// The legacy table is intact under its new name, its constraint renamed with its index.
	if n := scalar[int64](t, pool, `SELECT count(*) FROM processed_event_legacy`); n != int64(len(rows)) {
		t.Errorf("legacy table has %d rows, want %d", n, len(rows))
	}
	if c := scalar[string](t, pool, `SELECT string_agg(conname, ',') FROM pg_constraint WHERE conrelid = 'processed_event_legacy'::regclass AND contype = 'p'`); c != "processed_event_legacy_pkey" {
		t.Errorf("legacy primary key constraint is %q", c)
	}
	if relkind(t, pool, "processed_event") != "p" {
		t.Error("processed_event is not partitioned after the run")
	}
	// The operator's engine accepts the table as its own, layout included.
	eng, err := dedup.NewEngine(pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, owner); err != nil {
		t.Errorf("EnsureTable after the migration: %v", err)
	}
	// Every in-window id is a duplicate for the runtime; nothing else was copied.
	assertDuplicates(t, pool, tbl, "orders", in)
	if n := scalar[int64](t, pool, `SELECT count(*) FROM processed_event`); n != int64(len(in)) {
		t.Errorf("new table has %d rows, want %d", n, len(in))
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM processed_event WHERE consumer_group <> 'orders' OR processed_at <> $1`, now.Add(-time.Hour)); n != 0 {
		t.Errorf("%d rows lost their group or processing time", n)
	}
	// The skipped rows are listed, each with its reason.
	recs, err := csv.NewReader(&skipped).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	byReason := map[string]int64{}
	for _, r := range recs[1:] {
		byReason[r[3]]++
	}
	if len(recs) != 1+int(rep.SkippedTotal()) || !equalMaps(byReason, want) {
		t.Errorf("skipped CSV has %d records by reason %v, want %v", len(recs)-1, byReason, want)
	}
	var out strings.Builder
	rep.Write(&out)
	for _, s := range []string{"renamed to public.processed_event_legacy", "not_uuid_v7: 50", "verification: 0 eligible rows missing"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}

	// A re-run is a no-op.
	again, err := migrate.Run(ctx, pool, cfg)
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	check("re-run", again)
	if again.Renamed || again.Created || len(again.PartitionsCreated) != 0 || again.Copied != 0 || again.Missing != 0 {
		t.Errorf("re-run was not a no-op: %+v", again)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM processed_event`); n != int64(len(in)) {
		t.Errorf("new table has %d rows after the re-run, want %d", n, len(in))
	}
}

func equalMaps(a, b map[string]int64) bool {
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
