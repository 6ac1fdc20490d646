package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
