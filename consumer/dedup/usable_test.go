package dedup

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestEnsureTableIsUsableAtOnce: a table EnsureTable creates has its first
// partitions (the default policy at the current time), so a claim of an
// event made now is "new", not "outside_window", before anyone runs
// Maintain; ensuring it again makes none. WithoutFirstPartitions leaves a
// new table without partitions, for a caller that maintains at once with
// its own clock and policy (the operator, cmd/dedupctl). Before, every new
// table was unusable until Maintain ran: a user of the library alone got
// outside_window for every event.
func TestEnsureTableIsUsableAtOnce(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t)
	tbl := Table{Interval: Daily}
	e, err := NewEngine(pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	want := PlanPartitions(now, Daily, DefaultPremake, DefaultRetention, tbl.WithDefaults().Name, nil)
	if len(st.Partitions) != len(want.Create) || !st.Window.Contains(now) || !st.Window.Contains(now.Add(time.Duration(DefaultPremake-1)*24*time.Hour)) {
		t.Fatalf("a new table has %d partitions, window %v; want the %d of the default policy around now", len(st.Partitions), st.Window, len(want.Create))
	}
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	var verdict string
	if err := pool.QueryRow(ctx, `SELECT `+tbl.WithDefaults().ClaimOneFunction()+`($1, 'g')`, id).Scan(&verdict); err != nil {
		t.Fatal(err)
	}
	if verdict != "new" {
		t.Fatalf("claiming an event made now in a new table: %q, want new", verdict)
	}
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	if again, err := e.Observe(ctx); err != nil || len(again.Partitions) != len(st.Partitions) {
		t.Fatalf("ensuring again: %d partitions (%v), want %d", len(again.Partitions), err, len(st.Partitions))
	}

	bare := Table{Name: "bare_event", Interval: Daily}
	b, err := NewEngine(pool, bare, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Observe(ctx); err != nil || len(st.Partitions) != 0 {
		t.Fatalf("WithoutFirstPartitions: %d partitions (%v), want none", len(st.Partitions), err)
	}
}
