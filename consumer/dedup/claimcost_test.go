package dedup

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// claimCost measures, on one connection, the per-call time of the
// per-record claim function against a plain INSERT ... ON CONFLICT DO
// NOTHING of the same row into the same table, each call its own
// (implicit) transaction, as pgbench runs a one-statement script: calls
// alternate in rounds, and the result is the median of the rounds'
// per-call means. Every id is fresh (the verdict is new), stamped within
// the window.
func claimCost(ctx context.Context, t *testing.T, conn *pgx.Conn, tbl Table, at time.Time, rounds, calls int) (claimMs, insertMs float64) {
	t.Helper()
	claimSQL := "SELECT " + tbl.ClaimOneFunction() + "($1, 'g')"
	insertSQL := "INSERT INTO " + pgx.Identifier{tbl.Schema, tbl.Name}.Sanitize() + " (event_id, consumer_group) VALUES ($1, 'g') ON CONFLICT DO NOTHING"
	side := func(sql string, scan bool) float64 {
		ids := make([]uuid.UUID, calls)
		for i := range ids {
			ids[i] = idAt(at.Add(time.Duration(i) * time.Millisecond))
		}
		start := time.Now()
		for _, id := range ids {
			if scan {
				var v string
				if err := conn.QueryRow(ctx, sql, id).Scan(&v); err != nil || v != VerdictNew {
					t.Fatalf("%s: %q, %v", sql, v, err)
				}
			} else if _, err := conn.Exec(ctx, sql, id); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		return ms(time.Since(start)) / float64(calls)
	}
	side(claimSQL, true) // plans, caches
	side(insertSQL, false)
	var c, in []float64
	for r := range rounds {
		if r%2 == 0 {
			c = append(c, side(claimSQL, true))
			in = append(in, side(insertSQL, false))
		} else {
			in = append(in, side(insertSQL, false))
			c = append(c, side(claimSQL, true))
		}
	}
	return median(c), median(in)
}

// TestClaimOneCostReport prints RESULT per_record_ms=... insert_ms=...
// vs_insert=... (make bench: "RESULT claim ..."): the per-record claim
// function against a plain INSERT ... ON CONFLICT DO NOTHING per call.
//
//	DEDUP_BENCH=1 go test ./consumer/dedup/ -run '^TestClaimOneCostReport$' -count=1 -v
func TestClaimOneCostReport(t *testing.T) {
	if os.Getenv(EnvBench) == "" {
		t.Skipf("set %s=1 to run the claim cost report", EnvBench)
	}
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Name: "bench_claim_one"}.WithDefaults()
	claimTable(t, pool, tbl)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	claimMs, insertMs := claimCost(ctx, t, conn.Conn(), tbl, claimDay, 15, 400)
	fmt.Printf("RESULT per_record_ms=%.3f insert_ms=%.3f vs_insert=%.2f\n", claimMs, insertMs, claimMs/insertMs)
}

// TestClaimOneAgreesWithBatch: the single-id function's fast path (the
// first claim of a READ COMMITTED transaction inserts without reading the
// catalog) gives the batch function's verdict for every kind of id, in
// its own transaction, as the second claim of one, and under REPEATABLE
// READ; an outside_window verdict leaves the caller's transaction usable
// and records nothing.
func TestClaimOneAgreesWithBatch(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	one := Table{Name: "agree_one"}.WithDefaults()
	batch := Table{Name: "agree_batch"}.WithDefaults()
	claimTable(t, pool, one)
	claimTable(t, pool, batch)
	v4 := uuid.New()
	seen := idAt(claimDay.Add(time.Minute))
	cases := []struct {
		name string
		id   uuid.UUID
	}{
		{"new", idAt(claimDay)},
		{"seen", seen},
		{"again", seen},
		{"before the window", idAt(claimDay.Add(-30 * 24 * time.Hour))},
		{"after the window", idAt(claimDay.Add(30 * 24 * time.Hour))},
		{"v4", v4},
		{"nil", uuid.Nil},
	}
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		for _, second := range []bool{false, true} {
			for _, c := range cases {
				id := c.id
				if c.name == "new" {
					id = idAt(claimDay.Add(time.Duration(len(c.name)) * time.Second))
					id[15] ^= byte(len(iso)) + map[bool]byte{true: 1}[second]
				}
				verdict := func(tbl Table, fn func(tx pgx.Tx) (string, error)) string {
					t.Helper()
					var v string
					err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
						if second {
							if _, err := claimIDs(ctx, tx, tbl, "g", idAt(claimDay.Add(-time.Hour))); err != nil {
								return err
							}
						}
						var err error
						if v, err = fn(tx); err != nil {
							return err
						}
						// The transaction is still usable.
						_, err = tx.Exec(ctx, "SELECT 1")
						return err
					})
					if err != nil {
						t.Fatalf("%s %s second=%v %s: %v", tbl.Name, iso, second, c.name, err)
					}
					return v
				}
				arg := pgtypeUUID(id)
				got := verdict(one, func(tx pgx.Tx) (string, error) {
					var v string
					err := tx.QueryRow(ctx, "SELECT "+one.ClaimOneFunction()+"($1, 'g')", arg).Scan(&v)
					return v, err
				})
				want := verdict(batch, func(tx pgx.Tx) (string, error) {
					vs, err := claimIDs(ctx, tx, batch, "g", id)
					if err != nil || len(vs) != 1 {
						return "", fmt.Errorf("batch: verdicts %v: %w", vs, err)
					}
					return vs[0], nil
				})
				if got != want {
					t.Errorf("%s, second=%v, %s (%s): claim_one %q, batch %q", iso, second, c.name, id, got, want)
				}
			}
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+one.String()+" WHERE event_id < $1 OR event_id >= $2",
		BoundaryUUID(claimDay.Add(-3*24*time.Hour)), BoundaryUUID(claimDay.Add(3*24*time.Hour))).Scan(&n); err != nil || n != 0 {
		t.Errorf("rows outside the window: %d, %v", n, err)
	}
}

func pgtypeUUID(id uuid.UUID) any {
	if id == uuid.Nil {
		return nil
	}
	return id
}
