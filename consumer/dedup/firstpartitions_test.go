package dedup

import (
	"slices"
	"testing"
	"time"
)

// TestFirstPartitionsInOneTransaction: a new table's first partitions, up
// to firstPartitionsPerTransaction of them, are created and attached by one
// transaction (the xmin of every partition's pg_class row, which ATTACH
// rewrites, is the same), not two per partition; a crash leaves all or none
// of them (more: TestFirstPartitionsCrashBetweenTransactions). They are built like the partitions
// made one at a time later on: same columns and storage, indexes,
// constraints and marker, and no TOAST table (consumer_group is stored
// PLAIN), which would be two more relations and files per partition.
func TestFirstPartitionsInOneTransaction(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	e := newEngine(t, pool, tbl)
	start := time.Date(2025, 3, 1, 12, 30, 0, 0, time.UTC)
	res, err := e.Maintain(ctx, start, 3, 5*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) < 8 || len(res.Created) > firstPartitionsPerTransaction {
		t.Fatalf("first run created %v, want the retention and premake window (8 to %d)", names(res.Created), firstPartitionsPerTransaction)
	}
	var xmins int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT c.xmin::text) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'processed_event'::regclass`).Scan(&xmins); err != nil {
		t.Fatal(err)
	}
	if xmins != 1 {
		t.Fatalf("the %d first partitions were attached by %d transactions, want 1", len(res.Created), xmins)
	}

	// An hour later one more is due; it is made one at a time.
	res2, err := e.Maintain(ctx, start.Add(time.Hour), 3, 5*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(res2.Created) != 1 {
		t.Fatalf("second run created %v, want one partition", names(res2.Created))
	}
	first, later := res.Created[len(res.Created)-1].Name, res2.Created[0].Name
	describe := func(name string) []string {
		t.Helper()
		var (
			toast           bool
			cols, idx, cons []string
			marker          string
		)
		err := pool.QueryRow(ctx, `
SELECT c.reltoastrelid <> 0,
       ARRAY(SELECT a.attname || ' ' || a.attstorage::text || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull
               FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
       ARRAY(SELECT replace(pg_get_indexdef(x.indexrelid), c.relname, 'P') FROM pg_index x WHERE x.indrelid = c.oid ORDER BY 1),
       ARRAY(SELECT replace(con.conname, c.relname, 'P') || ' ' || con.contype::text FROM pg_constraint con WHERE con.conrelid = c.oid ORDER BY 1),
       regexp_replace(obj_description(c.oid, 'pg_class'), '[0-9a-f-]{36}', 'U', 'g')
  FROM pg_class c WHERE c.oid = $1::regclass`, name).Scan(&toast, &cols, &idx, &cons, &marker)
		if err != nil {
			t.Fatalf("describing %s: %v", name, err)
		}
		if toast {
			t.Errorf("partition %s has a TOAST table", name)
		}
		return append(append(append(cols, idx...), cons...), marker)
	}
	a, b := describe(first), describe(later)
	if !slices.Equal(a, b) {
		t.Fatalf("partition %s (first run) and %s (one at a time) differ:\n%q\n%q", first, later, a, b)
	}
	assertConverged(t, pool, e, start.Add(time.Hour), 3, 5*time.Hour)
}
