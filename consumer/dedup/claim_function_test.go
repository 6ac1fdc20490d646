package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
	oe, err := NewEngine(pool, other, WithoutFirstPartitions())
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
