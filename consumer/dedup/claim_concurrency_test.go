package dedup

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
