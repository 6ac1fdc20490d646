package dedup

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMarkedTablesNameRange: the marked-tables scan reads the relname range
// [<table>_p, <table>_q). For a table name of the longest length allowed, in
// a schema of its own, it finds every partition of ours and a detached one
// (an orphan), and nothing of the neighbours that sort just before and after
// the range, of the table of the same name in another schema, or of names
// that share the prefix without the "_p".
func TestMarkedTablesNameRange(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	name := strings.Repeat("z", MaxTableNameLen-2) + "_p" // ends in _p itself: its partitions are <name>_p...
	if len(name) != MaxTableNameLen {
		t.Fatalf("name of %d bytes", len(name))
	}
	for _, schema := range []string{"sa", "sb"} {
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2025, 3, 1, 12, 30, 0, 0, time.UTC)
	ea := newEngine(t, pool, Table{Schema: "sa", Name: name, Interval: Hourly})
	eb := newEngine(t, pool, Table{Schema: "sb", Name: name, Interval: Hourly})
	for _, e := range []*Engine{ea, eb} {
		if _, err := e.Maintain(ctx, now, 2, 3*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	st, err := ea.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := partitionNames(st.Partitions)
	oldest := want[0]
	// The oldest partition detached: a standalone table of ours.
	if _, err := pool.Exec(ctx, "ALTER TABLE sa."+name+" DETACH PARTITION sa."+oldest); err != nil {
		t.Fatal(err)
	}
	// Neighbours: bytewise just before and after the range, and sharing the
	// table name's prefix; some with a copy of our marker.
	for _, n := range []string{name + "_o2025030112", name + "_q2025030112", name + "_", name + "p2025030112", name + "_p", name[:len(name)-1]} {
		if _, err := pool.Exec(ctx, "CREATE TABLE sa."+n+" (LIKE sa."+oldest+" INCLUDING ALL)"); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "COMMENT ON TABLE sa."+n+" IS "+commentLiteral(t, pool, "sa."+oldest)); err != nil {
			t.Fatal(err)
		}
	}
	st, err = ea.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := partitionNames(st.Partitions); !slices.Equal(got, want[1:]) {
		t.Fatalf("partitions %v, want %v", got, want[1:])
	}
	if got := names(st.Orphans); !slices.Equal(got, []string{oldest}) || len(st.Foreign) != 0 {
		t.Fatalf("orphans %v, foreign %v; want orphan %s only", got, st.Foreign, oldest)
	}
	// The other schema's table is as it was.
	stb, err := eb.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := partitionNames(stb.Partitions); !slices.Equal(got, want) || len(stb.Orphans) != 0 {
		t.Fatalf("sb: partitions %v orphans %v, want %v and none", got, names(stb.Orphans), want)
	}
}

// commentLiteral is the comment of table as an SQL literal.
func commentLiteral(t *testing.T, pool interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, table string) string {
	t.Helper()
	var lit string
	if err := pool.QueryRow(testCtx(t), "SELECT quote_literal(obj_description($1::regclass, 'pg_class'))", table).Scan(&lit); err != nil {
		t.Fatal(err)
	}
	return lit
}
