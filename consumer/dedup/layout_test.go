package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var layoutStart = time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)

// TestLayoutStepsMatchMarkerVersion: the registry has one step per version
// below markerVersion, in order, so raising markerVersion without adding
// its step (or the reverse) fails here rather than on a user's table.
func TestLayoutStepsMatchMarkerVersion(t *testing.T) {
	if len(layoutSteps) != markerVersion {
		t.Fatalf("%d layout steps, markerVersion %d: want one step per version below it", len(layoutSteps), markerVersion)
	}
	for i, s := range layoutSteps {
		if s.From != i || s.What == "" {
			t.Errorf("layoutSteps[%d] = {From: %d, What: %q}, want From %d and a description", i, s.From, s.What, i)
		}
	}
	if LayoutVersion() != markerVersion {
		t.Errorf("LayoutVersion() = %d, want %d", LayoutVersion(), markerVersion)
	}
}

// rawMarker is the table's comment decoded as a JSON object, so a test sees
// exactly which keys a marker has (a missing "version" included).
func rawMarker(t *testing.T, pool *pgxpool.Pool, tbl Table) map[string]any {
	t.Helper()
	tbl = tbl.WithDefaults()
	var comment string
	if err := pool.QueryRow(testCtx(t), `SELECT coalesce(obj_description($1::regclass, 'pg_class'), '')`,
		pgx.Identifier{tbl.Schema, tbl.Name}.Sanitize()).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(comment), &m); err != nil {
		t.Fatalf("table comment %q is not JSON: %v", comment, err)
	}
	return m
}

// setMarker writes m as the table's comment, as another release would have.
func setMarker(t *testing.T, pool *pgxpool.Pool, tbl Table, m map[string]any) {
	t.Helper()
	tbl = tbl.WithDefaults()
	lit, err := jsonLiteral(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(testCtx(t), "COMMENT ON TABLE "+pgx.Identifier{tbl.Schema, tbl.Name}.Sanitize()+" IS "+lit); err != nil {
		t.Fatal(err)
	}
}

// catalogSnapshot lists every relation of the schema with its kind, its
// partition bound, whether a detach is pending, and its comment: what a
// change to the table or its partitions (even of a marker) would show. The
// comment of skipComment (a relation name) is left out.
func catalogSnapshot(t *testing.T, pool *pgxpool.Pool, schema, skipComment string) string {
	t.Helper()
	rows, err := pool.Query(testCtx(t), `
SELECT c.relname::text, c.relkind::text, coalesce(pg_get_expr(c.relpartbound, c.oid), ''),
       coalesce((SELECT i.inhdetachpending FROM pg_inherits i WHERE i.inhrelid = c.oid), false),
       coalesce(obj_description(c.oid, 'pg_class'), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 ORDER BY c.relname`, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var name, kind, bound, comment string
		var pending bool
		if err := rows.Scan(&name, &kind, &bound, &pending, &comment); err != nil {
			t.Fatal(err)
		}
		if name == skipComment {
			comment = "(not compared)"
		}
		fmt.Fprintf(&b, "%s %s %q pending=%t %s\n", name, kind, bound, pending, comment)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// olderTable makes a table with partitions and rows, whose marker is then
// rewritten to the given version (nil: no "version" key, as markers were
// before the version was read).
func olderTable(t *testing.T, pool *pgxpool.Pool, version any) (Table, *Engine) {
	t.Helper()
	tbl := Table{Interval: Hourly}
	e := newEngine(t, pool, tbl)
	if _, err := e.Maintain(testCtx(t), layoutStart, 2, 4*time.Hour); err != nil {
		t.Fatal(err)
	}
	in, _ := NewInserter(tbl, "g")
	insertCommit(t, pool, in, idsAt(layoutStart, layoutStart.Add(-time.Hour))...)
	m := rawMarker(t, pool, tbl)
	if version == nil {
		delete(m, "version")
	} else {
		m["version"] = version
	}
	setMarker(t, pool, tbl, m)
	return tbl, e
}

// TestOlderMarkerIsMigrated: a table whose marker has no version (an older
// release's) is migrated by EnsureTable: the marker names the current
// version afterwards, keeps owner, scope and interval, and nothing else in
// the schema changes (the step from 0 to 1 changes no layout). Maintain
// does the same for a table it finds at an older version.
func TestOlderMarkerIsMigrated(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl, _ := olderTable(t, pool, nil)
	before := catalogSnapshot(t, pool, DefaultSchema, "processed_event")
	rows := countRows(t, pool, "processed_event")

	fresh, err := NewEngine(pool, tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.EnsureTable(ctx, testOwner); err != nil {
		t.Fatalf("EnsureTable on a table without a marker version: %v", err)
	}
	m := rawMarker(t, pool, tbl)
	want := map[string]any{"idempotency.dev/owner": testOwner, "scope": string(tbl.WithDefaults().Scope), "interval": string(Hourly), "version": float64(markerVersion)}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Fatalf("marker after EnsureTable = %v, want %v", m, want)
	}
	if after := catalogSnapshot(t, pool, DefaultSchema, "processed_event"); after != before {
		t.Fatalf("catalog after the migration:\n%s\nwant it unchanged but for the table's marker:\n%s", after, before)
	}
	if n := countRows(t, pool, "processed_event"); n != rows {
		t.Fatalf("%d rows after the migration, want %d", n, rows)
	}

	// Maintain finds version 0 (written explicitly this time) and migrates.
	m["version"] = 0
	setMarker(t, pool, tbl, m)
	if _, err := fresh.Maintain(ctx, layoutStart, 2, 4*time.Hour); err != nil {
		t.Fatalf("Maintain on a table of version 0: %v", err)
	}
	if v := rawMarker(t, pool, tbl)["version"]; v != float64(markerVersion) {
		t.Fatalf("marker version after Maintain = %v, want %d", v, markerVersion)
	}
}

// TestNewerLayoutIsRefused: a table whose marker names a version newer
// than this build knows (laid out by a newer release, then the operator
// was downgraded) is refused by EnsureTable, Maintain, Adopt and DropTable
// with a *LayoutVersionError naming both versions, and nothing in the
// schema changes: no partition created or dropped, no marker rewritten.
func TestNewerLayoutIsRefused(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	newer := markerVersion + 1
	tbl, _ := olderTable(t, pool, newer)
	before := catalogSnapshot(t, pool, DefaultSchema, "")
	rows := countRows(t, pool, "processed_event")

	e, err := NewEngine(pool, tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	check := func(call string, err error) {
		t.Helper()
		var lv *LayoutVersionError
		if !errors.As(err, &lv) {
			t.Fatalf("%s on a table of version %d = %v, want a *LayoutVersionError", call, newer, err)
		}
		if lv.Found != newer || lv.Known != markerVersion || !strings.Contains(err.Error(), "newer release") {
			t.Fatalf("%s: %+v (%v), want found %d, known %d and a message naming a newer release", call, lv, err, newer, markerVersion)
		}
		if IsRetryable(err) {
			t.Fatalf("%s: %v is retryable; only another release can manage the table", call, err)
		}
		if got := catalogSnapshot(t, pool, DefaultSchema, ""); got != before {
			t.Fatalf("%s changed the schema:\n%s\nbefore:\n%s", call, got, before)
		}
	}
	check("EnsureTable", e.EnsureTable(ctx, testOwner))
	// Hours later: a Maintain that ran would create and drop partitions.
	_, err = e.Maintain(ctx, layoutStart.Add(6*time.Hour), 2, 4*time.Hour)
	check("Maintain", err)
	_, err = e.Adopt(ctx, newOwner, testOwner)
	check("Adopt", err)
	check("DropTable", e.DropTable(ctx, testOwner))
	if n := countRows(t, pool, "processed_event"); n != rows {
		t.Fatalf("%d rows, want %d", n, rows)
	}
}

// withLayout gives an engine other migration steps (see engineConfig.layout).
func withLayout(steps []layoutStep) Option { return func(c *engineConfig) { c.layout = steps } }

// TestLayoutStepIsOneFunction shows how the next layout change is added:
// a step from version 1 to 2 (here a column comment) runs once on a table
// at version 1, in one transaction with the marker's rewrite: a step that
// fails leaves neither its change nor a new version, and the next call runs
// it again; a table already at version 2 is not touched.
func TestLayoutStepIsOneFunction(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl, _ := olderTable(t, pool, 1)
	colComment := func() string {
		var c string
		if err := pool.QueryRow(ctx, `SELECT coalesce(col_description('public.processed_event'::regclass, 3), '')`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	fail := true
	runs := 0
	steps := append(append([]layoutStep(nil), layoutSteps...), layoutStep{
		From: 1,
		What: "document processed_at",
		Apply: func(ctx context.Context, e *Engine, conn *pgx.Conn) error {
			runs++
			if err := e.exec(ctx, conn, "COMMENT ON COLUMN "+e.parent()+".processed_at IS 'when the event was first processed'"); err != nil {
				return err
			}
			if fail {
				return errors.New("injected failure after the step's statement")
			}
			return nil
		},
	})
	e, err := NewEngine(pool, tbl, withLayout(steps), WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.EnsureTable(ctx, testOwner); err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("EnsureTable with a failing step = %v, want the step's error", err)
	}
	if v, c := rawMarker(t, pool, tbl)["version"], colComment(); v != float64(1) || c != "" {
		t.Fatalf("after a failed step: marker version %v, column comment %q; want 1 and none (rolled back)", v, c)
	}
	fail = false
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatalf("EnsureTable: %v", err)
	}
	if v, c := rawMarker(t, pool, tbl)["version"], colComment(); v != float64(2) || c != "when the event was first processed" {
		t.Fatalf("after the step: marker version %v, column comment %q; want 2 and the step's comment", v, c)
	}
	if _, err := e.Maintain(ctx, layoutStart, 2, 4*time.Hour); err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("the step ran %d times, want 2 (the failed attempt and the one that committed)", runs)
	}
	// A build without the step refuses the table now.
	plain, err := NewEngine(pool, tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	var lv *LayoutVersionError
	if err := plain.EnsureTable(ctx, testOwner); !errors.As(err, &lv) || lv.Found != 2 {
		t.Fatalf("EnsureTable of a build at version 1 on a table at version 2 = %v, want *LayoutVersionError", err)
	}
}
