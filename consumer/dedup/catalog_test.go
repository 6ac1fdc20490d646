package dedup

import (
	"regexp"
	"strings"
	"testing"
)

// TestMarkedTablesUsesTheNameIndex: the scan for our partition tables, run
// on every observe, reads pg_class through its index on relname, not the
// whole catalog (in a database of 1,000 tables that was some 65,000 rows per
// call, 10-35 ms, several calls per reconcile). With sequential scans turned
// off, a condition the index cannot use still reads all of it (by a Seq Scan,
// or by the index's second column, relnamespace).
func TestMarkedTablesUsesTheNameIndex(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+markedTablesSQL, "public", "processed_event_p", "processed_event_q", "processed_event", true)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !regexp.MustCompile(`Index Cond: \(\(relname >= `).MatchString(text) {
		t.Fatalf("the marked-tables query does not read pg_class by its relname index:\n%s", text)
	}
}
