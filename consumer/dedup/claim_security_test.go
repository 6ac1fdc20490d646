package dedup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestClaimSearchPathIndependent: the verdicts do not depend on the caller's
// search_path. The functions are SECURITY INVOKER and their bodies name
// operators (=, <>, >=, ||) and types (uuid, text) without a schema; without
// a search_path of their own, an operator in a schema the caller lists
// before pg_catalog, or a type of the caller's temporary schema (searched
// for types before pg_catalog unless listed), is what runs: an in-window v7
// id came back not_v7, or the claim failed with 42883 and aborted the
// caller's transaction. An installation made without the setting (an older
// version) gets it on the next EnsureTable.
func TestClaimSearchPathIndependent(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Schema: "dedup", Name: "claim_path", Scope: ScopeConsumerGroup}.WithDefaults()
	e := claimTable(t, pool, tbl)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA shadow;
CREATE FUNCTION shadow.always(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR shadow.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = shadow.always)`); err != nil {
		t.Fatal(err)
	}
	setups := map[string]string{
		"operator before pg_catalog": "SET search_path = shadow, pg_catalog, public",
		"temporary type uuid":        "CREATE TYPE pg_temp.uuid AS (a int)",
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, setup); err != nil {
				t.Fatal(err)
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			id, other := idAt(claimDay), idAt(claimDay)
			// Parameters are sent with pg_catalog.uuid's OID, so the
			// caller's own statement is not affected by its setup.
			if got, err := claimIDs(ctx, tx, tbl, "g", id); err != nil || !slices.Equal(got, []string{"new"}) {
				t.Fatalf("first claim: %v, %v; want [new]", got, err)
			}
			// The second claim of the transaction: the careful path.
			if got, err := claimIDs(ctx, tx, tbl, "g", id, other); err != nil || !slices.Equal(got, []string{"duplicate", "new"}) {
				t.Fatalf("second claim: %v, %v; want [duplicate new]", got, err)
			}
			var v string
			if err := tx.QueryRow(ctx, "SELECT "+tbl.ClaimOneFunction()+"($1, 'g')", idAt(claimDay)).Scan(&v); err != nil || v != "new" {
				t.Fatalf("claim_one: %q, %v; want new", v, err)
			}
			stillUsable(t, tx)
		})
	}

	// An installation without the setting is upgraded.
	for _, fn := range []string{tbl.ClaimFunction() + "(uuid[], text)", tbl.ClaimOneFunction() + "(uuid, text)"} {
		if _, err := pool.Exec(ctx, "ALTER FUNCTION "+fn+" RESET ALL"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{tbl.ClaimFunction(), tbl.ClaimOneFunction()} {
		var cfg []string
		if err := pool.QueryRow(ctx, "SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE oid = $1::regproc", fn).Scan(&cfg); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(cfg, func(s string) bool { return strings.HasPrefix(s, "search_path=pg_catalog") }) {
			t.Fatalf("%s after EnsureTable: proconfig %v, want a search_path starting with pg_catalog", fn, cfg)
		}
	}
}

// TestClaimExecuteNotRevokedByDefaults: a database hardened with ALTER
// DEFAULT PRIVILEGES ... REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC (for the
// role that runs EnsureTable) must not take the claim functions away from a
// role with the documented privileges (USAGE on the schema, SELECT and
// INSERT on the table): docs/any-language.md promises exactly those. The
// functions are SECURITY INVOKER, so EXECUTE for PUBLIC grants nothing the
// table's privileges do not; EnsureTable grants it, also to functions made
// before.
func TestClaimExecuteNotRevokedByDefaults(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	if _, err := pool.Exec(ctx, "ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	tbl := Table{Schema: "dedup", Name: "claim_exec", Scope: ScopeConsumerGroup}.WithDefaults()
	e := claimTable(t, pool, tbl)
	role := fmt.Sprintf("claim_exec_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE ROLE "+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	if _, err := pool.Exec(ctx, fmt.Sprintf("GRANT USAGE ON SCHEMA dedup TO %[1]s; GRANT SELECT, INSERT ON %[2]s TO %[1]s", role, tbl)); err != nil {
		t.Fatal(err)
	}
	claimAs := func() ([]string, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
			return nil, err
		}
		v, err := claimIDs(ctx, tx, tbl, "g", idAt(claimDay))
		if err != nil {
			return nil, err
		}
		var one string
		if err := tx.QueryRow(ctx, "SELECT "+tbl.ClaimOneFunction()+"($1, 'g')", idAt(claimDay)).Scan(&one); err != nil {
			return nil, fmt.Errorf("claim_one: %w", err)
		}
		return append(v, one), nil
	}
	if got, err := claimAs(); err != nil || !slices.Equal(got, []string{"new", "new"}) {
		t.Fatalf("claim as %s after EnsureTable: %v, %v; want [new new]", role, got, err)
	}
	// Functions installed before, without the grant: EnsureTable adds it.
	for _, fn := range []string{tbl.ClaimFunction() + "(uuid[], text)", tbl.ClaimOneFunction() + "(uuid, text)"} {
		if _, err := pool.Exec(ctx, "REVOKE EXECUTE ON FUNCTION "+fn+" FROM PUBLIC"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	if got, err := claimAs(); err != nil || !slices.Equal(got, []string{"new", "new"}) {
		t.Fatalf("claim as %s after a second EnsureTable: %v, %v; want [new new]", role, got, err)
	}
}
