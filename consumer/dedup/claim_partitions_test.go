package dedup

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TestClaimPartitionGone claims an id, then its partition expires (detached
// and dropped) and, on another table, is left pending detach: in both cases
// the id is outside the window for the function and the Go Inserter alike,
// and the caller's transaction goes on.
func TestClaimPartitionGone(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_gone", Scope: ScopeGlobal, Interval: Hourly}.WithDefaults()
	e := newEngine(t, pool, tbl, WithLockTimeout(200*time.Millisecond), WithAttempts(2), WithBackoff(20*time.Millisecond, 50*time.Millisecond))
	start := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	const premake, retention = 1, 3 * time.Hour
	if _, err := e.Maintain(ctx, start, premake, retention); err != nil {
		t.Fatal(err)
	}
	oldID := idAt(start.Add(-3 * time.Hour)) // in the oldest partition
	keep := idAt(start)
	if got := mustClaim(t, pool, tbl, "g", oldID, keep); !slices.Equal(got, []string{"new", "new"}) {
		t.Fatalf("first claim: %v", got)
	}
	in, err := NewInserter(tbl, "g")
	if err != nil {
		t.Fatal(err)
	}

	// Pending detach: a reader makes the second phase of DETACH
	// CONCURRENTLY wait; the lock timeout leaves the partition pending.
	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM "+tbl.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Maintain(ctx, start.Add(time.Hour), premake, retention); !IsRetryable(err) {
		t.Fatalf("Maintain behind a reader = %v, want a retryable lock error", err)
	}
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(st.Partitions, func(p ObservedPartition) bool { return p.DetachPending }) {
		t.Fatalf("no partition pending detach: %+v", st.Partitions)
	}
	check := func(stage string) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		fresh := idAt(start.Add(time.Hour))
		ids := []uuid.UUID{oldID, keep, fresh}
		got := mustClaim(t, tx, tbl, "g", ids...)
		if want := []string{"outside_window", "duplicate", "new"}; !slices.Equal(got, want) {
			t.Fatalf("%s: verdicts %v, want %v", stage, got, want)
		}
		stillUsable(t, tx)
		// A second claim in the same transaction (the careful path).
		if got := mustClaim(t, tx, tbl, "g", oldID, fresh); !slices.Equal(got, []string{"outside_window", "duplicate"}) {
			t.Fatalf("%s: second claim %v", stage, got)
		}
		stillUsable(t, tx)
		res, err := in.Insert(ctx, tx, ids)
		if err != nil {
			t.Fatalf("%s: Go Inserter: %v", stage, err)
		}
		for i, id := range ids {
			if g := goVerdict(id, res, i); g != map[int]string{0: "outside_window", 1: "duplicate", 2: "duplicate"}[i] {
				t.Fatalf("%s: Go Inserter says %s for %s", stage, g, id)
			}
		}
	}
	check("pending detach")
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := e.Maintain(ctx, start.Add(time.Hour), premake, retention)
	if err != nil || len(res.Dropped) == 0 {
		t.Fatalf("Maintain after the reader: dropped %v, %v", res.Dropped, err)
	}
	check("detached and dropped")
}

// TestClaimPartitionAttachedDuringTransaction: a transaction that already
// holds the table's lock does not see a partition attached since (its cached
// partition descriptor is not refreshed), so a plain INSERT of an id of that
// partition fails with 23514 although the catalog shows the partition. The
// claim function must not fail there: it reports the id outside the window
// and the transaction goes on; a new transaction gets it as new.
func TestClaimPartitionAttachedDuringTransaction(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_att", Scope: ScopeConsumerGroup, Interval: Daily}.WithDefaults()
	e := claimTable(t, pool, tbl)
	later := claimDay.AddDate(0, 0, 5)
	id := idAt(later)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if got := mustClaim(t, tx, tbl, "g", idAt(claimDay), id); !slices.Equal(got, []string{"new", "outside_window"}) {
		t.Fatalf("before the attach: %v", got)
	}
	// Another session attaches the partitions up to later+1 day (ATTACH
	// takes SHARE UPDATE EXCLUSIVE, which the claim's lock does not block).
	if _, err := e.Maintain(ctx, later, 1, 30*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	// What PostgreSQL does to a plain insert in this transaction.
	if _, err := tx.Exec(ctx, "SAVEPOINT plain"); err != nil {
		t.Fatal(err)
	}
	_, plainErr := tx.Exec(ctx, "INSERT INTO "+tbl.String()+" (event_id, consumer_group) VALUES ($1, 'other')", idAt(later))
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT plain"); err != nil {
		t.Fatal(err)
	}
	t.Logf("plain insert into the newly attached partition in the old transaction: %v", plainErr)

	got := mustClaim(t, tx, tbl, "g", id, id)
	stillUsable(t, tx)
	if isCheckViolation(plainErr) {
		if !slices.Equal(got, []string{"outside_window", "outside_window"}) {
			t.Fatalf("after the attach, stale descriptor: %v, want outside_window twice", got)
		}
	} else if plainErr != nil {
		t.Fatalf("plain insert: %v", plainErr)
	} else if !slices.Equal(got, []string{"new", "duplicate"}) {
		t.Fatalf("after the attach: %v", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := "new"
	if !isCheckViolation(plainErr) {
		want = "duplicate"
	}
	if got := mustClaim(t, pool, tbl, "g", id); !slices.Equal(got, []string{want}) {
		t.Fatalf("in a new transaction: %v, want %s", got, want)
	}
}

// TestClaimSubpartitionedGap attaches a foreign partition that is itself
// partitioned and leaves a gap inside its bounds: no leaf accepts an id in
// the gap, although the partition's bounds cover it. The function reports
// it outside the window instead of failing (the Go Inserter fails with
// 23514 there, its transaction still usable), and records the others.
func TestClaimSubpartitionedGap(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_sub", Scope: ScopeConsumerGroup, Interval: Daily}.WithDefaults()
	claimTable(t, pool, tbl)
	lo, mid, hi := claimDay.AddDate(0, 0, 10), claimDay.AddDate(0, 0, 11), claimDay.AddDate(0, 0, 12)
	if _, err := pool.Exec(ctx, fmt.Sprintf(`
CREATE TABLE foreign_sub PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s') PARTITION BY RANGE (event_id);
CREATE TABLE foreign_sub_a PARTITION OF foreign_sub FOR VALUES FROM ('%s') TO ('%s')`,
		tbl, BoundaryUUID(lo), BoundaryUUID(hi), BoundaryUUID(lo), BoundaryUUID(mid))); err != nil {
		t.Fatal(err)
	}
	inLeaf, inGap, inDay := idAt(lo.Add(time.Hour)), idAt(mid.Add(time.Hour)), idAt(claimDay)
	ids := []uuid.UUID{inGap, inLeaf, inDay, inGap, inLeaf, notV7(4), idAt(hi.AddDate(0, 0, 3))}
	want := []string{"outside_window", "new", "new", "outside_window", "duplicate", "not_v7", "outside_window"}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for round, w := range [][]string{want, {"outside_window", "duplicate", "duplicate", "outside_window", "duplicate", "not_v7", "outside_window"}} {
		if got := mustClaim(t, tx, tbl, "g", ids...); !slices.Equal(got, w) {
			t.Fatalf("round %d: verdicts %v, want %v", round, got, w)
		}
		stillUsable(t, tx)
	}
	in, err := NewInserter(tbl, "g")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Insert(ctx, tx, []uuid.UUID{inGap}); !isCheckViolation(err) {
		t.Fatalf("Go Inserter on the gap: %v, want 23514", err)
	}
	stillUsable(t, tx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, tbl.String()); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

// TestClaimNotBlockedByLockedPartition: another session holds ACCESS
// EXCLUSIVE on one partition (a VACUUM FULL, a plain DETACH). A claim of ids
// in other partitions does not wait for it: the function reads the bounds
// with pg_get_expr(relpartbound, 0), which opens no partition, and the insert
// locks only the partitions its rows go to. (The Go Inserter's window read
// locks every partition and needs its refresh lock timeout for this.)
func TestClaimNotBlockedByLockedPartition(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_lk", Scope: ScopeGlobal}.WithDefaults()
	claimTable(t, pool, tbl)
	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	locked := PartitionName(tbl.Name, Daily, claimDay.AddDate(0, 0, -1))
	if _, err := locker.Exec(ctx, "LOCK TABLE "+pgx.Identifier{tbl.Schema, locked}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Two claims: the first-claim path and the careful one.
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 2 {
		got, err := claimIDs(ctx, tx, tbl, nil, idAt(claimDay), idAt(claimDay.AddDate(0, 0, 1)), idAt(claimDay.AddDate(0, 0, 30)))
		if err != nil {
			t.Fatalf("claim %d with %s locked: %v", i, locked, err)
		}
		if !slices.Equal(got, []string{"new", "new", "outside_window"}) && !slices.Equal(got, []string{"duplicate", "duplicate", "outside_window"}) {
			t.Fatalf("claim %d: %v", i, got)
		}
	}
	// A claim that waited for the lock fails after lock_timeout (2s) above;
	// this says so for one that waited and then got it.
	if d := time.Since(start); d > 1900*time.Millisecond {
		t.Fatalf("claims took %s with an unrelated partition locked", d)
	}
}

// TestClaimRepeatableReadDetach: under REPEATABLE READ the transaction's
// snapshot predates the claim, so it can still show a partition that a
// plain DETACH removed after it was taken, while the insert routes with the
// catalog as it is now. The claim must report the id outside the window, not
// fail with 23514.
func TestClaimRepeatableReadDetach(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_rr", Scope: ScopeGlobal}.WithDefaults()
	claimTable(t, pool, tbl)
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	stillUsable(t, tx) // takes the snapshot
	gone := PartitionName(tbl.Name, Daily, claimDay.AddDate(0, 0, -1))
	if _, err := pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s", tbl, pgx.Identifier{tbl.Schema, gone}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	got, err := claimIDs(ctx, tx, tbl, nil, idAt(claimDay.AddDate(0, 0, -1)), idAt(claimDay))
	if err != nil {
		t.Fatalf("claim under REPEATABLE READ after a DETACH: %v", err)
	}
	if !slices.Equal(got, []string{"outside_window", "new"}) {
		t.Fatalf("verdicts %v", got)
	}
	stillUsable(t, tx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClaimDefaultPartition: a (foreign) DEFAULT partition accepts every id,
// so nothing is outside the window, for the function as for the Inserter.
func TestClaimDefaultPartition(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_def", Scope: ScopeConsumerGroup}.WithDefaults()
	claimTable(t, pool, tbl)
	if _, err := pool.Exec(ctx, "CREATE TABLE claim_def_other PARTITION OF "+tbl.String()+" DEFAULT"); err != nil {
		t.Fatal(err)
	}
	ids := []uuid.UUID{idAt(claimDay), idAt(claimDay.AddDate(-3, 0, 0)), idAt(claimDay.AddDate(5, 0, 0)), uuid.New()}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if got := mustClaim(t, tx, tbl, "g", ids...); !slices.Equal(got, []string{"new", "new", "new", "not_v7"}) {
		t.Fatalf("verdicts %v", got)
	}
	in, err := NewInserter(tbl, "g")
	if err != nil {
		t.Fatal(err)
	}
	res, err := in.Insert(ctx, tx, ids[:3])
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if g := goVerdict(ids[i], res, i); g != "duplicate" {
			t.Fatalf("Go Inserter after the claim: %s for %s", g, ids[i])
		}
	}
}
