package dedup

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claimDay is the day the claim tests' window is built around.
var claimDay = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

// Queryer and Exec: what claim runs on (a pgx.Tx, *pgx.Conn or pool).
type claimQueryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// toPG converts ids for a uuid[] parameter; uuid.Nil stands for NULL.
func toPG(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: id != uuid.Nil}
	}
	return out
}

// claimIDs calls tbl's claim function on q and returns the verdicts, checking
// that there is one row per id, in input order, echoing the id.
func claimIDs(ctx context.Context, q claimQueryer, tbl Table, group any, ids ...uuid.UUID) ([]string, error) {
	rows, err := q.Query(ctx, "SELECT event_id, verdict FROM "+tbl.ClaimFunction()+"($1, $2)", toPG(ids), group)
	if err != nil {
		return nil, err
	}
	var out []string
	i := 0
	for rows.Next() {
		var (
			id pgtype.UUID
			v  string
		)
		if err := rows.Scan(&id, &v); err != nil {
			rows.Close()
			return nil, err
		}
		if i >= len(ids) || id.Valid != (ids[i] != uuid.Nil) || (id.Valid && uuid.UUID(id.Bytes) != ids[i]) {
			rows.Close()
			return nil, fmt.Errorf("row %d echoes id %v, want %v", i, id, ids[min(i, len(ids)-1)])
		}
		out = append(out, v)
		i++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(ids) {
		return nil, fmt.Errorf("%d rows for %d ids", len(out), len(ids))
	}
	return out, nil
}

func mustClaim(t *testing.T, q claimQueryer, tbl Table, group any, ids ...uuid.UUID) []string {
	t.Helper()
	v, err := claimIDs(testCtx(t), q, tbl, group, ids...)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return v
}

// stillUsable fails the test unless tx can still run a statement.
func stillUsable(t *testing.T, tx pgx.Tx) {
	t.Helper()
	var one int
	if err := tx.QueryRow(testCtx(t), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("transaction not usable after the claim: %v", err)
	}
}

// claimTable creates tbl with daily partitions around claimDay (the day
// before, the day, the day after) and returns the engine.
func claimTable(t *testing.T, pool *pgxpool.Pool, tbl Table) *Engine {
	t.Helper()
	e := newEngine(t, pool, tbl)
	if _, err := e.Maintain(testCtx(t), claimDay, 1, 48*time.Hour); err != nil {
		t.Fatalf("Maintain: %v", err)
	}
	return e
}

func notV7(version byte) uuid.UUID {
	u := idAt(claimDay)
	u[6] = version<<4 | u[6]&0x0f
	return u
}

func TestClaimVerdicts(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	for _, scope := range []Scope{ScopeGlobal, ScopeConsumerGroup} {
		t.Run(string(scope), func(t *testing.T) {
			tbl := Table{Name: "claim_" + map[Scope]string{ScopeGlobal: "g", ScopeConsumerGroup: "cg"}[scope], Scope: scope}.WithDefaults()
			claimTable(t, pool, tbl)
			in := idAt(claimDay)
			old := idAt(claimDay.AddDate(0, 0, -10))
			future := idAt(claimDay.AddDate(0, 0, 10))
			v4 := uuid.New()
			badVariant := idAt(claimDay)
			badVariant[8] = badVariant[8]&0x3f | 0xc0 // Microsoft variant
			ids := []uuid.UUID{in, old, future, v4, badVariant, uuid.Nil, in, notV7(4)}
			want := []string{"new", "outside_window", "outside_window", "not_v7", "not_v7", "not_v7", "duplicate", "not_v7"}

			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			got := mustClaim(t, tx, tbl, "g1", ids...)
			if !slices.Equal(got, want) {
				t.Fatalf("verdicts %v, want %v", got, want)
			}
			stillUsable(t, tx)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if n := countRows(t, pool, tbl.String()); n != 1 {
				t.Fatalf("%d rows, want 1 (only the new id)", n)
			}
			// Again, in a transaction of its own: a duplicate now.
			if got := mustClaim(t, pool, tbl, "g1", in); !slices.Equal(got, []string{"duplicate"}) {
				t.Fatalf("second claim: %v", got)
			}
			// Another group: a duplicate under Global, new under ConsumerGroup.
			wantOther := map[Scope]string{ScopeGlobal: "duplicate", ScopeConsumerGroup: "new"}[scope]
			if got := mustClaim(t, pool, tbl, "g2", in); !slices.Equal(got, []string{wantOther}) {
				t.Fatalf("claim by another group: %v, want %s", got, wantOther)
			}
			// Each group gets new once.
			for _, g := range []string{"g1", "g2"} {
				if got := mustClaim(t, pool, tbl, g, in); !slices.Equal(got, []string{"duplicate"}) {
					t.Fatalf("claim by %s again: %v", g, got)
				}
			}
			// The single-id form.
			var v string
			if err := pool.QueryRow(ctx, "SELECT "+tbl.ClaimOneFunction()+"($1, 'g3')", idAt(claimDay)).Scan(&v); err != nil || v != "new" {
				t.Fatalf("claim_one: %q, %v", v, err)
			}
			if err := pool.QueryRow(ctx, "SELECT "+tbl.ClaimOneFunction()+"(NULL, 'g3')").Scan(&v); err != nil || v != "not_v7" {
				t.Fatalf("claim_one(NULL): %q, %v", v, err)
			}
			// Empty and NULL arrays: no rows.
			for _, arg := range []any{[]pgtype.UUID{}, nil} {
				var n int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl.ClaimFunction()+"($1::uuid[], 'g1')", arg).Scan(&n); err != nil || n != 0 {
					t.Fatalf("claim of %v: %d rows, %v", arg, n, err)
				}
			}
		})
	}
}

func TestClaimGroupRequired(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_cg", Scope: ScopeConsumerGroup}.WithDefaults()
	claimTable(t, pool, tbl)
	for _, group := range []any{nil, ""} {
		_, err := claimIDs(ctx, pool, tbl, group, idAt(claimDay))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Fatalf("group %v: err %v, want SQLSTATE 22023", group, err)
		}
		t.Logf("group %#v: %s (hint: %s)", group, pgErr.Message, pgErr.Hint)
	}
	if n := countRows(t, pool, tbl.String()); n != 0 {
		t.Fatalf("%d rows after refused claims", n)
	}
	// Under Global the group is optional (recorded as '').
	g := Table{Name: "claim_g", Scope: ScopeGlobal}.WithDefaults()
	claimTable(t, pool, g)
	if got := mustClaim(t, pool, g, nil, idAt(claimDay)); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("global claim without group: %v", got)
	}
}

// v7At returns the smallest (low) or largest (!low) UUID v7 stamped in the
// millisecond of tm: the ids nearest to a partition bound.
func v7At(tm time.Time, low bool) uuid.UUID {
	u := BoundaryUUID(tm)
	fill := byte(0x00)
	if !low {
		fill = 0xff
	}
	for i := 6; i < 16; i++ {
		u[i] = fill
	}
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

// TestClaimBoundaries claims the ids nearest to every bound of the window:
// the lower bound is inclusive, the upper exclusive, and past the newest
// partition's upper bound (and before the oldest's lower) is outside.
func TestClaimBoundaries(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_b", Scope: ScopeConsumerGroup, Interval: Daily}.WithDefaults()
	e := claimTable(t, pool, tbl)
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Partitions) < 3 {
		t.Fatalf("want at least 3 partitions, have %v", partitionNames(st.Partitions))
	}
	var ids []uuid.UUID
	var want []string
	add := func(id uuid.UUID, v string) { ids = append(ids, id); want = append(want, v) }
	for i, p := range st.Partitions {
		from, to, ok := p.TimeRange()
		if !ok {
			t.Fatalf("partition %s has no time range", p.Name)
		}
		if i == 0 {
			add(v7At(from.Add(-time.Millisecond), false), "outside_window") // just below the oldest bound
		}
		add(v7At(from, true), "new")                       // the lower bound is inclusive
		add(v7At(to.Add(-time.Millisecond), false), "new") // the last id below the upper bound
		add(BoundaryUUID(from), "not_v7")                  // the bound itself: version 0
		if i == len(st.Partitions)-1 {
			add(v7At(to, true), "outside_window") // the newest upper bound is exclusive
			add(uuid.Max, "not_v7")
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if got := mustClaim(t, tx, tbl, "g", ids...); !slices.Equal(got, want) {
		t.Fatalf("verdicts\n got %v\nwant %v", got, want)
	}
	stillUsable(t, tx)
	// The Go Inserter, on the same transaction, sees the same window: every
	// id the function took is a duplicate for it, every outside id outside.
	in, err := NewInserter(tbl, "g")
	if err != nil {
		t.Fatal(err)
	}
	res, err := in.Insert(ctx, tx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if got := goVerdict(id, res, i); want[i] != "not_v7" && got != map[string]string{"new": "duplicate", "outside_window": "outside_window"}[want[i]] {
			t.Errorf("id %s: Go Inserter %s after the function's %s", id, got, want[i])
		}
	}
}

// goVerdict is the verdict the Go runtime gives ids[i]: not_v7 by the
// envelope's rule (version 7, RFC 9562 variant), else from res.
func goVerdict(id uuid.UUID, res BatchResult, i int) string {
	switch {
	case id.Version() != 7 || id.Variant() != uuid.RFC4122:
		return "not_v7"
	case res.Outside[i]:
		return "outside_window"
	case res.Fresh[i]:
		return "new"
	}
	return "duplicate"
}

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

// waitingClaims counts the sessions whose claim waits on another
// transaction (a concurrent uncommitted insert of the same id).
func waitingClaims(ctx context.Context, pool *pgxpool.Pool, fn string) int {
	var n int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND wait_event = 'transactionid' AND query LIKE '%' || $1 || '%'`, fn).Scan(&n)
	return n
}

// TestClaimConcurrent: two sessions claim one id. The second waits for the
// first's transaction and reports duplicate if it commits, new if it rolls
// back; exactly one row either way. Under ConsumerGroup a second group is
// not held up at all.
func TestClaimConcurrent(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	for _, scope := range []Scope{ScopeGlobal, ScopeConsumerGroup} {
		tbl := Table{Name: "claim_conc_" + map[Scope]string{ScopeGlobal: "g", ScopeConsumerGroup: "cg"}[scope], Scope: scope}.WithDefaults()
		claimTable(t, pool, tbl)
		for _, firstCommits := range []bool{true, false} {
			name := fmt.Sprintf("%s/first %s", scope, map[bool]string{true: "commits", false: "rolls back"}[firstCommits])
			t.Run(name, func(t *testing.T) {
				id := idAt(claimDay)
				tx1, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx1.Rollback(ctx)
				if got := mustClaim(t, tx1, tbl, "g", id); got[0] != "new" {
					t.Fatalf("first claim: %v", got)
				}
				type outcome struct {
					v   []string
					err error
				}
				done := make(chan outcome, 1)
				go func() {
					var v []string
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						var err error
						if v, err = claimIDs(ctx, tx, tbl, "g", id); err != nil {
							return err
						}
						_, err = tx.Exec(ctx, "SELECT 1") // still usable
						return err
					})
					done <- outcome{v, err}
				}()
				waitFor(t, func() bool { return waitingClaims(ctx, pool, tbl.Name+claimSuffix) == 1 }, "the second claim waiting on the first transaction")
				select {
				case o := <-done:
					t.Fatalf("second claim returned while the first was open: %v %v", o.v, o.err)
				default:
				}
				if scope == ScopeConsumerGroup {
					// Another group's claim of the same id does not wait.
					if got := mustClaim(t, pool, tbl, "other", id); got[0] != "new" {
						t.Fatalf("other group: %v", got)
					}
				}
				if firstCommits {
					err = tx1.Commit(ctx)
				} else {
					err = tx1.Rollback(ctx)
				}
				if err != nil {
					t.Fatal(err)
				}
				o := recvWithin(t, done, time.Minute, "the second claim to return after the first ended")
				if o.err != nil {
					t.Fatal(o.err)
				}
				want := map[bool]string{true: "duplicate", false: "new"}[firstCommits]
				if o.v[0] != want {
					t.Fatalf("second claim %v, want %s", o.v, want)
				}
				var n int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl.String()+" WHERE event_id = $1 AND consumer_group = 'g'", id).Scan(&n); err != nil || n != 1 {
					t.Fatalf("%d rows of group g for the id (err %v), want 1", n, err)
				}
			})
		}
	}
}

// TestClaimNoDeadlock: claims insert their ids in sorted order, so a claim
// of (b, a) waiting on a session that holds a does not hold b meanwhile, and
// that session can go on to claim b. Unsorted, the two would deadlock.
func TestClaimNoDeadlock(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_dl", Scope: ScopeGlobal}.WithDefaults()
	claimTable(t, pool, tbl)
	a, b := idAt(claimDay), idAt(claimDay.Add(time.Hour))
	if lessUUID(b, a) {
		a, b = b, a
	}
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	if got := mustClaim(t, tx1, tbl, "g", a); got[0] != "new" {
		t.Fatalf("claim a: %v", got)
	}
	done := make(chan error, 1)
	var v []string
	go func() {
		done <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			v, err = claimIDs(ctx, tx, tbl, "g", b, a)
			return err
		})
	}()
	waitFor(t, func() bool { return waitingClaims(ctx, pool, tbl.Name+claimSuffix) == 1 }, "the claim of (b, a) waiting")
	got, err := claimIDs(ctx, tx1, tbl, "g", b)
	if err != nil {
		t.Fatalf("claim b while (b, a) waits: %v", err)
	}
	if got[0] != "new" {
		t.Fatalf("claim b: %v", got)
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvWithin(t, done, time.Minute, "the claim of (b, a)"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v, []string{"duplicate", "duplicate"}) {
		t.Fatalf("claim of (b, a): %v", v)
	}
}

// agreementLayout gives tbl the same partitions as every other table it is
// called for: ours around claimDay with the one of claimDay-1 detached and
// dropped (a hole), and foreign ones from MINVALUE, to MAXVALUE and with
// bounds inside a millisecond (not on a boundary). It returns the bounds, to
// draw ids next to them.
func agreementLayout(t *testing.T, pool *pgxpool.Pool, tbl Table) []uuid.UUID {
	t.Helper()
	ctx := testCtx(t)
	e := newEngine(t, pool, tbl)
	if _, err := e.Maintain(ctx, claimDay, 2, 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	hole := pgx.Identifier{tbl.Schema, PartitionName(tbl.Name, Daily, claimDay.AddDate(0, 0, -1))}.Sanitize()
	oldEnd := BoundaryUUID(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	newStart := BoundaryUUID(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	midLo, midHi := agreementMid()
	sql := fmt.Sprintf(`
ALTER TABLE %[1]s DETACH PARTITION %[2]s;
DROP TABLE %[2]s;
CREATE TABLE %[3]s PARTITION OF %[1]s FOR VALUES FROM (MINVALUE) TO ('%[4]s');
CREATE TABLE %[5]s PARTITION OF %[1]s FOR VALUES FROM ('%[6]s') TO (MAXVALUE);
CREATE TABLE %[7]s PARTITION OF %[1]s FOR VALUES FROM ('%[8]s') TO ('%[9]s')`,
		tbl, hole, tbl.Name+"_f_old", oldEnd, tbl.Name+"_f_new", newStart, tbl.Name+"_f_mid", midLo, midHi)
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var bounds []uuid.UUID
	for _, p := range st.Partitions {
		if !p.FromMin {
			bounds = append(bounds, p.From)
		}
		if !p.ToMax {
			bounds = append(bounds, p.To)
		}
	}
	return bounds
}

// agreementMid is a foreign partition's bounds that are not millisecond
// boundaries: v7 ids of claimDay+5d and +6d with fixed low bits.
func agreementMid() (lo, hi uuid.UUID) {
	lo = v7At(claimDay.AddDate(0, 0, 5), true)
	hi = v7At(claimDay.AddDate(0, 0, 6), true)
	lo[15], hi[10] = 0x5a, 0x77
	return lo, hi
}

// TestClaimAgreesWithInserter feeds the same 100,000 ids (500 a batch, one
// transaction each) to the claim function on one table and to the Go runtime
// (the envelope's version check, then Inserter.Insert) on another with the
// same partitions, and compares verdict for verdict (every other batch goes
// to the function in two calls, the second on its careful path). The ids
// mix fresh ids in and around the window, ids next to every bound (inside
// and outside a millisecond), repeats within and across batches, and ids
// that are not UUID v7; under ConsumerGroup two groups take turns.
func TestClaimAgreesWithInserter(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	for _, c := range []struct {
		scope Scope
		n     int
	}{{ScopeConsumerGroup, 100_000}, {ScopeGlobal, 20_000}} {
		t.Run(string(c.scope), func(t *testing.T) {
			suffix := map[Scope]string{ScopeGlobal: "g", ScopeConsumerGroup: "cg"}[c.scope]
			sqlTbl := Table{Name: "agree_sql_" + suffix, Scope: c.scope}.WithDefaults()
			goTbl := Table{Name: "agree_go_" + suffix, Scope: c.scope}.WithDefaults()
			bounds := agreementLayout(t, pool, sqlTbl)
			agreementLayout(t, pool, goTbl)
			groups := []string{"g1", "g2"}
			inserters := map[string]*Inserter{}
			for _, g := range groups {
				in, err := NewInserter(goTbl, g)
				if err != nil {
					t.Fatal(err)
				}
				inserters[g] = in
			}
			gen := newAgreementIDs(bounds)
			counts := map[string]int{}
			const batch = 500
			for b := 0; b*batch < c.n; b++ {
				group := groups[b%len(groups)]
				ids := gen.batch(batch)
				var sqlV []string
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if b%2 == 0 {
						var err error
						sqlV, err = claimIDs(ctx, tx, sqlTbl, group, ids...)
						return err
					}
					// Every other batch in two calls, so the second runs the
					// careful path (the transaction claimed before).
					for _, part := range [][]uuid.UUID{ids[:batch/3], ids[batch/3:]} {
						v, err := claimIDs(ctx, tx, sqlTbl, group, part...)
						if err != nil {
							return err
						}
						sqlV = append(sqlV, v...)
					}
					return nil
				}); err != nil {
					t.Fatalf("batch %d: claim: %v", b, err)
				}
				goV := make([]string, len(ids))
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var send []uuid.UUID
					var at []int
					for i, id := range ids {
						if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
							goV[i] = "not_v7" // the envelope's rule: refused before the dedup insert
							continue
						}
						send = append(send, id)
						at = append(at, i)
					}
					res, err := inserters[group].Insert(ctx, tx, send)
					if err != nil {
						return err
					}
					for j, i := range at {
						goV[i] = goVerdict(send[j], res, j)
					}
					return nil
				}); err != nil {
					t.Fatalf("batch %d: Go Inserter: %v", b, err)
				}
				for i := range ids {
					if sqlV[i] != goV[i] {
						t.Fatalf("batch %d, id %d (%s, version %d, time %s): claim says %s, Go runtime %s",
							b, i, ids[i], ids[i].Version(), EventTime(ids[i]).Format(time.RFC3339Nano), sqlV[i], goV[i])
					}
					counts[sqlV[i]]++
				}
			}
			t.Logf("%d ids agree: %v", c.n, counts)
			for _, v := range []string{"new", "duplicate", "outside_window", "not_v7"} {
				if counts[v] < c.n/50 {
					t.Errorf("only %d ids got %s: the mix does not exercise it", counts[v], v)
				}
			}
			if a, b := countRows(t, pool, sqlTbl.String()), countRows(t, pool, goTbl.String()); a != b || a != counts["new"] {
				t.Fatalf("rows: %d by the function, %d by the Inserter, %d verdicts new", a, b, counts["new"])
			}
		})
	}
}

// agreementIDs draws the ids of TestClaimAgreesWithInserter.
type agreementIDs struct {
	bounds []uuid.UUID
	used   []uuid.UUID
	rnd    *mathrand.Rand
}

func newAgreementIDs(bounds []uuid.UUID) *agreementIDs {
	return &agreementIDs{bounds: bounds, rnd: mathrand.New(mathrand.NewPCG(14, 2026))}
}

func (g *agreementIDs) batch(n int) []uuid.UUID {
	out := make([]uuid.UUID, 0, n)
	for len(out) < n {
		var id uuid.UUID
		switch r := g.rnd.IntN(100); {
		case r < 40: // anywhere from 4 days before claimDay to 4 after (the window, the hole, both edges)
			id = g.v7(claimDay.Add(time.Duration(g.rnd.Int64N(int64(8*24*time.Hour))) - 4*24*time.Hour))
		case r < 55: // next to a bound: the same millisecond or the one before, either side of it
			b := g.bounds[g.rnd.IntN(len(g.bounds))]
			id = g.v7(EventTime(b).Add(-time.Duration(g.rnd.IntN(2)) * time.Millisecond))
			copy(id[:6], b[:6])
			if g.rnd.IntN(2) == 0 {
				id = v7At(EventTime(b).Add(-time.Duration(g.rnd.IntN(2))*time.Millisecond), g.rnd.IntN(2) == 0)
			}
		case r < 60: // long ago or far ahead (foreign MINVALUE / MAXVALUE partitions)
			id = g.v7(time.Date(1990+g.rnd.IntN(150), 1, 1, 0, 0, 0, 0, time.UTC))
		case r < 75 && len(g.used) > 0: // a repeat, from this batch or an earlier one
			id = g.used[g.rnd.IntN(len(g.used))]
		case r < 90: // not version 7: v4, version 7 with another variant, versions 0, 1, 6, 8, 15
			id = g.v7(claimDay)
			switch g.rnd.IntN(3) {
			case 0:
				id[6] = id[6]&0x0f | []byte{0x00, 0x10, 0x40, 0x60, 0x80, 0xf0}[g.rnd.IntN(6)]
			case 1:
				id[8] = id[8]&0x3f | []byte{0x00, 0x40, 0xc0, 0xe0}[g.rnd.IntN(4)]
			default:
				id = uuid.New()
			}
		default:
			id = g.v7(claimDay.Add(time.Duration(g.rnd.Int64N(int64(2 * time.Hour)))))
		}
		out = append(out, id)
		g.used = append(g.used, id)
	}
	return out
}

// v7 is a UUID v7 stamped at tm with random low bits from g's source.
func (g *agreementIDs) v7(tm time.Time) uuid.UUID {
	u := v7At(tm, true)
	for i := 6; i < 16; i++ {
		u[i] = byte(g.rnd.Uint32())
	}
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

// TestClaimBenchmarkReport compares the claim function with the Go Inserter
// on batches of 500 fresh in-window ids, one transaction per batch, on the
// same server. Each round times the three sides back to back (in rotating
// order, so load from elsewhere hits them alike): the function as the
// transaction's first claim, the Inserter, and the function as the
// transaction's second claim (the careful path: the insert in a
// subtransaction; the first claim of a single id is not counted). It prints
// medians over the rounds:
//
//	RESULT claim_ids_per_s=<a> inserter_ids_per_s=<b> claim_vs_inserter=<median of per-round a/b> claim_careful_ids_per_s=<c> careful_vs_claim=<median c/a> claim_dup_ids_per_s=<d>
//
// (claim_dup: the first batches again, every id a duplicate). Run with
//
//	DEDUP_BENCH=1 go test ./consumer/dedup/ -run '^TestClaimBenchmarkReport$' -count=1 -v
func TestClaimBenchmarkReport(t *testing.T) {
	if os.Getenv(EnvBench) == "" {
		t.Skipf("set %s=1 to run the claim benchmark", EnvBench)
	}
	pool := newPool(t)
	ctx := testCtx(t)
	const batch, rounds = 500, 40
	sqlTbl := Table{Name: "bench_claim", Scope: ScopeConsumerGroup}.WithDefaults()
	goTbl := Table{Name: "bench_inserter", Scope: ScopeConsumerGroup}.WithDefaults()
	claimTable(t, pool, sqlTbl)
	claimTable(t, pool, goTbl)
	in, err := NewInserter(goTbl, "g")
	if err != nil {
		t.Fatal(err)
	}
	fresh := func() []uuid.UUID {
		ids := make([]uuid.UUID, batch)
		for i := range ids {
			ids[i] = idAt(claimDay.Add(time.Duration(mathrand.Int64N(int64(12 * time.Hour)))))
		}
		return ids
	}
	timed := func(f func(tx pgx.Tx) error) float64 {
		start := time.Now()
		if err := pgx.BeginFunc(ctx, pool, f); err != nil {
			t.Fatal(err)
		}
		return float64(batch) / time.Since(start).Seconds()
	}
	claim := func(ids []uuid.UUID) func(tx pgx.Tx) error {
		return func(tx pgx.Tx) error { _, err := claimIDs(ctx, tx, sqlTbl, "g", ids...); return err }
	}
	sides := []func(ids []uuid.UUID) func(tx pgx.Tx) error{
		claim,
		func(ids []uuid.UUID) func(tx pgx.Tx) error {
			return func(tx pgx.Tx) error { _, err := in.Insert(ctx, tx, ids); return err }
		},
		func(ids []uuid.UUID) func(tx pgx.Tx) error {
			return func(tx pgx.Tx) error {
				if _, err := claimIDs(ctx, tx, sqlTbl, "g", idAt(claimDay.Add(-time.Hour))); err != nil {
					return err
				}
				_, err := claimIDs(ctx, tx, sqlTbl, "g", ids...)
				return err
			}
		},
	}
	// Warm up (plans, caches).
	for _, side := range sides {
		timed(side(fresh()))
	}
	rates := make([][]float64, len(sides))
	var firstBatches [][]uuid.UUID
	for r := range rounds {
		for k := range sides {
			s := (r + k) % len(sides)
			ids := fresh()
			if s == 0 {
				firstBatches = append(firstBatches, ids)
			}
			rates[s] = append(rates[s], timed(sides[s](ids)))
		}
	}
	var dup []float64
	for _, ids := range firstBatches {
		dup = append(dup, timed(claim(ids)))
	}
	ratio := func(a, b []float64) float64 {
		rs := make([]float64, len(a))
		for i := range a {
			rs[i] = a[i] / b[i]
		}
		return median(rs)
	}
	fmt.Printf("RESULT claim_ids_per_s=%.0f inserter_ids_per_s=%.0f claim_vs_inserter=%.2f claim_careful_ids_per_s=%.0f careful_vs_claim=%.2f claim_dup_ids_per_s=%.0f\n",
		median(rates[0]), median(rates[1]), ratio(rates[0], rates[1]), median(rates[2]), ratio(rates[2], rates[0]), median(dup))
}

// procXmin returns the xmin of the function's pg_proc row: it changes when
// the function is replaced.
func procXmin(t *testing.T, pool *pgxpool.Pool, fn string) uint32 {
	t.Helper()
	var xmin uint32
	if err := pool.QueryRow(testCtx(t), `SELECT xmin FROM pg_proc WHERE oid = $1::regproc`, fn).Scan(&xmin); err != nil {
		t.Fatalf("looking up %s: %v", fn, err)
	}
	return xmin
}

// TestClaimEnsure: EnsureTable installs both functions with their marker,
// leaves them alone when they are up to date (replacing them would make
// every session re-plan), replaces an outdated definition, refuses a
// function of the same name and arguments that is not ours, and fits the
// longest table name. dropClaim removes ours only.
func TestClaimEnsure(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_ens", Scope: ScopeConsumerGroup}.WithDefaults()
	e := claimTable(t, pool, tbl)
	x1, x2 := procXmin(t, pool, tbl.ClaimFunction()), procXmin(t, pool, tbl.ClaimOneFunction())
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	if y1, y2 := procXmin(t, pool, tbl.ClaimFunction()), procXmin(t, pool, tbl.ClaimOneFunction()); y1 != x1 || y2 != x2 {
		t.Fatalf("an up-to-date function was replaced (xmin %d,%d -> %d,%d)", x1, x2, y1, y2)
	}
	// An outdated definition (an older version) is replaced.
	if _, err := pool.Exec(ctx, "CREATE OR REPLACE FUNCTION "+tbl.ClaimOneFunction()+"(id uuid, consumer_group text DEFAULT NULL) RETURNS text LANGUAGE sql AS $$ SELECT 'old' $$"); err != nil {
		t.Fatal(err)
	}
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := pool.QueryRow(ctx, "SELECT "+tbl.ClaimOneFunction()+"($1, 'g')", idAt(claimDay)).Scan(&v); err != nil || v != "new" {
		t.Fatalf("after the upgrade: %q, %v", v, err)
	}
	var comment string
	if err := pool.QueryRow(ctx, "SELECT obj_description($1::regproc, 'pg_proc')", tbl.ClaimFunction()).Scan(&comment); err != nil ||
		comment != `{"idempotency.dev/claim-of":"public.claim_ens","version":2}` {
		t.Fatalf("marker %q, %v", comment, err)
	}

	// A function of someone else's with the name and arguments.
	other := Table{Name: "claim_taken", Scope: ScopeGlobal}.WithDefaults()
	if _, err := pool.Exec(ctx, "CREATE FUNCTION public.claim_taken_claim(a uuid[], b text) RETURNS TABLE (x uuid, y text) LANGUAGE sql AS $$ SELECT NULL::uuid, 'mine' $$"); err != nil {
		t.Fatal(err)
	}
	oe, err := NewEngine(pool, other)
	if err != nil {
		t.Fatal(err)
	}
	err = oe.EnsureTable(ctx, testOwner)
	var nc *NameConflictError
	if !errors.As(err, &nc) || nc.Kind != "function" || nc.Name != "public.claim_taken_claim(uuid[], text)" || !strings.Contains(err.Error(), "ALTER FUNCTION public.claim_taken_claim(uuid[], text) RENAME TO") {
		t.Fatalf("EnsureTable over a foreign function: %v, want a *NameConflictError for it", err)
	}
	t.Logf("conflict: %v", err)
	var src string
	if err := pool.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE proname = 'claim_taken_claim'").Scan(&src); err != nil || !strings.Contains(src, "'mine'") {
		t.Fatalf("the foreign function was replaced: %q, %v", src, err)
	}

	// The longest table name: the function names fit in 63 bytes.
	long := Table{Name: strings.Repeat("c", MaxTableNameLen), Scope: ScopeGlobal}.WithDefaults()
	if n := len(long.Name + claimOneSuffix); n > MaxIdentifierLen {
		t.Fatalf("%d-byte function name", n)
	}
	le := claimTable(t, pool, long)
	if got := mustClaim(t, pool, long, nil, idAt(claimDay)); got[0] != "new" {
		t.Fatalf("claim on the longest name: %v", got)
	}
	if err := le.EnsureTable(ctx, testOwner); err != nil {
		t.Fatalf("second EnsureTable: %v", err)
	}

	// dropClaim drops ours, and leaves the foreign one alone.
	for _, en := range []*Engine{e, oe} {
		conn, release, err := en.session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = en.dropClaim(ctx, conn)
		release()
		if err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname IN ('claim_ens_claim', 'claim_ens_claim_one', 'claim_taken_claim')").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d functions left (%v), want only the foreign one", n, err)
	}
}

// TestClaimLeastPrivilege: a role with SELECT, INSERT and DELETE on the
// table (and USAGE on its schema) and nothing else can claim: the function
// runs with the caller's rights (SECURITY INVOKER) and needs no others.
// A role without INSERT gets a permission error, not a verdict.
func TestClaimLeastPrivilege(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Schema: "dedup", Name: "claim_priv", Scope: ScopeConsumerGroup}.WithDefaults()
	claimTable(t, pool, tbl)
	role := fmt.Sprintf("claim_app_%d", time.Now().UnixNano())
	reader := role + "_ro"
	for _, r := range []string{role, reader} {
		if _, err := pool.Exec(ctx, "CREATE ROLE "+r); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+r)
			_, _ = pool.Exec(context.Background(), "DROP ROLE "+r)
		})
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`GRANT USAGE ON SCHEMA dedup TO %[1]s, %[2]s;
GRANT SELECT, INSERT, DELETE ON %[3]s TO %[1]s;
GRANT SELECT ON %[3]s TO %[2]s`, role, reader, tbl)); err != nil {
		t.Fatal(err)
	}
	asRole := func(r string, ids ...uuid.UUID) ([]string, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+r); err != nil {
			return nil, err
		}
		v, err := claimIDs(ctx, tx, tbl, "g", ids...)
		if err != nil {
			return nil, err
		}
		// A second claim in the transaction takes the careful path.
		if _, err := claimIDs(ctx, tx, tbl, "g", ids...); err != nil {
			return nil, fmt.Errorf("second claim: %w", err)
		}
		return v, tx.Commit(ctx)
	}
	got, err := asRole(role, idAt(claimDay), idAt(claimDay.AddDate(0, 0, 20)), uuid.New())
	if err != nil || !slices.Equal(got, []string{"new", "outside_window", "not_v7"}) {
		t.Fatalf("claim as %s: %v, %v", role, got, err)
	}
	_, err = asRole(reader, idAt(claimDay))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("claim as %s (no INSERT): %v, want SQLSTATE 42501", reader, err)
	}
}

// TestClaimMarksTransaction: the setting that sends a transaction's later
// claims down the careful path is transaction-local: set inside, gone after
// commit, and gone after a rollback to a savepoint taken before the claim.
func TestClaimMarksTransaction(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "claim_mark", Scope: ScopeGlobal}.WithDefaults()
	claimTable(t, pool, tbl)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	mark := func() string {
		t.Helper()
		var s *string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1, true)", claimSettingName(tbl)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s == nil {
			return ""
		}
		return *s
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustClaim(t, tx, tbl, nil, idAt(claimDay))
	if m := mark(); m != "claimed" {
		t.Fatalf("inside the transaction: %q", m)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if m := mark(); m != "" {
		t.Fatalf("after commit: %q", m)
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, tx, tbl, nil, idAt(claimDay))
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
		t.Fatal(err)
	}
	if m := mark(); m != "" {
		t.Fatalf("after rolling back the claim's savepoint: %q", m)
	}
	if got := mustClaim(t, tx, tbl, nil, idAt(claimDay)); got[0] != "new" {
		t.Fatalf("claim after the rollback: %v", got)
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
	if d := time.Since(start); d > time.Second {
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
