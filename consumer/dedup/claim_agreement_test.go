package dedup

import (
	"fmt"
	mathrand "math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
