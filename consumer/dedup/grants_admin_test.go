package dedup

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// TestGrantConsumerErrors: a role that does not exist, the owner's own role
// (the single-role setup), a group name that needs quoting, and a schema
// whose USAGE the operator's role cannot grant.
func TestGrantConsumerErrors(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	if _, err := r.eng.GrantConsumer(ctx, "no_such_role_"+strings.ReplaceAll(uuid.NewString(), "-", ""), "g1"); !errors.Is(err, ErrRoleNotFound) {
		t.Errorf("missing role: %v, want ErrRoleNotFound", err)
	}
	if _, err := r.eng.GrantConsumer(ctx, "", "g1"); err == nil {
		t.Error("empty role accepted")
	}
	if _, err := r.eng.GrantConsumer(ctx, r.consumer.Name, ""); err == nil {
		t.Error("empty group accepted")
	}
	res, err := r.eng.GrantConsumer(ctx, r.owner.Name, "g1")
	if err != nil || res.Unrestricted == "" || len(res.Statements) != 0 {
		t.Errorf("the owner's role: %+v %v, want Unrestricted and no statement", res, err)
	}
	// A BYPASSRLS role gets its privileges, and is reported unrestricted.
	bypass := consumertest.NewRole(t, r.admin.Config().ConnString(), "bypass", "BYPASSRLS")
	res, err = r.eng.GrantConsumer(ctx, bypass.Name, "g1")
	if err != nil || !strings.Contains(res.Unrestricted, "BYPASSRLS") || len(res.Statements) == 0 {
		t.Errorf("a BYPASSRLS role: %+v %v, want its grants and Unrestricted naming BYPASSRLS", res, err)
	}
	// A group with a quote and a backslash is a literal, not SQL.
	odd := `o'dd\group`
	r.grant(t, odd)
	in, err := NewInserter(r.tbl, odd)
	if err != nil {
		t.Fatal(err)
	}
	if got := insertCommit(t, r.consDB, in, idAt(r.now)); !got.Fresh[0] {
		t.Errorf("group %q: %+v", odd, got)
	}

	// A schema the operator's role may create in but not grant on.
	if _, err := r.admin.Exec(ctx, "CREATE SCHEMA shared; GRANT USAGE, CREATE ON SCHEMA shared TO "+pgx.Identifier{r.owner.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	tbl := Table{Schema: "shared", Name: "processed_event", Scope: ScopeConsumerGroup, Interval: Daily}
	eng := newEngine(t, r.ownerDB, tbl)
	var sue *SchemaUsageError
	if _, err := eng.GrantConsumer(ctx, r.consumer.Name, "g1"); !errors.As(err, &sue) {
		t.Fatalf("schema without grant option: %v, want *SchemaUsageError", err)
	} else {
		t.Logf("schema without grant option: %v", err)
	}
	if _, err := r.admin.Exec(ctx, "GRANT USAGE ON SCHEMA shared TO "+pgx.Identifier{r.consumer.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.GrantConsumer(ctx, r.consumer.Name, "g1"); err != nil {
		t.Fatalf("after the schema's owner granted USAGE: %v", err)
	}
}

// TestGrantConsumerBehindABusyTable: creating a policy needs ACCESS
// EXCLUSIVE on the table for an instant; behind an open insert transaction
// GrantConsumer gives up after the lock timeout with a retryable
// *LockError instead of queueing (and making every later insert queue
// behind it), and succeeds once the transaction is gone.
func TestGrantConsumerBehindABusyTable(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	r.grant(t, "g1")
	eng := newEngine(t, r.ownerDB, r.tbl, WithLockTimeout(100*time.Millisecond), WithAttempts(2), WithBackoff(10*time.Millisecond, 20*time.Millisecond))
	in, err := NewInserter(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := r.consDB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := in.Insert(ctx, tx, []uuid.UUID{idAt(r.now)}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = eng.GrantConsumer(ctx, r.consumer.Name, "g3")
	var le *LockError
	if !errors.As(err, &le) || !IsRetryable(err) {
		t.Fatalf("grant behind an open insert: %v, want a retryable *LockError", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("grant gave up after %s", took)
	}
	t.Logf("behind an open insert: %v", err)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.GrantConsumer(ctx, r.consumer.Name, "g3"); err != nil {
		t.Fatalf("after the insert committed: %v", err)
	}
}

// TestCheckAccess: the consumer's start-up check names what its role
// lacks, before the grant, for a group without a policy, and after the
// grant is taken back; the owner passes.
func TestCheckAccess(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	var ae *AccessError
	err := CheckAccess(ctx, r.consDB, r.tbl, "g1", true)
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "no USAGE on schema app") {
		t.Fatalf("before the grant: %v, want *AccessError about USAGE", err)
	}
	t.Logf("before the grant: %v", err)
	if err := CheckAccess(ctx, r.ownerDB, r.tbl, "g1", true); err != nil {
		t.Fatalf("the owner: %v", err)
	}
	r.grant(t, "g1")
	if err := CheckAccess(ctx, r.consDB, r.tbl, "g1", true); err != nil {
		t.Fatalf("after the grant: %v", err)
	}
	err = CheckAccess(ctx, r.consDB, r.tbl, "g2", true)
	if !errors.As(err, &ae) || len(ae.Problems) != 2 || !strings.Contains(err.Error(), "row-level security on app.processed_event and no policy") {
		t.Fatalf("another group: %v, want *AccessError naming both tables' row-level security", err)
	}
	t.Logf("another group: %v", err)
	if _, err := r.eng.RevokeConsumer(ctx, r.consumer.Name, "g1"); err != nil {
		t.Fatal(err)
	}
	err = CheckAccess(ctx, r.consDB, r.tbl, "g1", true)
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "no SELECT, INSERT, DELETE on app.processed_event") {
		t.Fatalf("after the revoke: %v", err)
	}
	t.Logf("after the revoke: %v", err)
}

// TestRevokeConsumer: revoking one group of a role shared by two drops that
// group's policies only (its rows are refused, the other group's still
// work); revoking the last takes every privilege back; a second revoke, and
// a revoke for a role that does not exist, do nothing.
func TestRevokeConsumer(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	r.grant(t, "g1")
	r.grant(t, "g3")
	res, err := r.eng.RevokeConsumer(ctx, r.consumer.Name, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Statements) != 2 || !strings.HasPrefix(res.Statements[0], "DROP POLICY") {
		t.Errorf("revoking g1 of a role that also serves g3: %v, want its two policies dropped and nothing else", res.Statements)
	}
	g1, _ := NewInserter(r.tbl, "g1")
	g3, _ := NewInserter(r.tbl, "g3")
	if got := insertCommit(t, r.consDB, g3, idAt(r.now)); !got.Fresh[0] {
		t.Errorf("g3 after g1's revoke: %+v", got)
	}
	if code, msg, _ := sqlstate(t, r.consDB, `INSERT INTO app.processed_event (event_id, consumer_group) VALUES ($1, 'g1')`, idAt(r.now)); code != "42501" {
		t.Errorf("g1's row after its revoke: %q %s, want 42501", code, msg)
	}
	res, err = r.eng.RevokeConsumer(ctx, r.consumer.Name, "g3")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Statements {
		t.Logf("revoked: %s", s)
	}
	err = pgx.BeginFunc(ctx, r.consDB, func(tx pgx.Tx) error {
		_, err := g1.Insert(ctx, tx, []uuid.UUID{idAt(r.now)})
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("insert after the last revoke: %v, want 42501", err)
	}
	for _, tbl := range []string{"app.processed_event", "app.processed_event_offsets"} {
		var any bool
		if err := r.admin.QueryRow(ctx, `SELECT has_table_privilege($1, $2, 'SELECT') OR has_table_privilege($1, $2, 'INSERT') OR has_table_privilege($1, $2, 'UPDATE') OR has_table_privilege($1, $2, 'DELETE')`,
			r.consumer.Name, tbl).Scan(&any); err != nil || any {
			t.Errorf("privileges left on %s: %v %v", tbl, any, err)
		}
	}
	if res, err := r.eng.RevokeConsumer(ctx, r.consumer.Name, "g3"); err != nil || len(res.Statements) != 0 {
		t.Errorf("second revoke: %v %v, want nothing", res.Statements, err)
	}
	if res, err := r.eng.RevokeConsumer(ctx, "no_such_role_x", "g3"); err != nil || len(res.Statements) != 0 {
		t.Errorf("revoke for a missing role: %v %v, want nothing", res.Statements, err)
	}
	// The owner's role (a consumer URL that named it, before) is never
	// touched: its own privileges are in the table's ACL too.
	if res, err := r.eng.RevokeConsumer(ctx, r.owner.Name, "g3"); err != nil || len(res.Statements) != 0 {
		t.Errorf("revoke for the owner's role: %v %v, want nothing", res.Statements, err)
	}
	if got := countRows(t, r.ownerDB, "app.processed_event"); got == 0 {
		t.Error("the owner sees no rows")
	}
}

// TestRLSCostReport measures what the consumer group policy costs the
// batched dedup insert (500 fresh ids per transaction; the statement, not
// the commit) and the
// lookup of 500 recorded ids (Recorded), as the consumer's role, on two
// tables alike but for row-level security: "rls" after GrantConsumer,
// "grants" with the same grants and row security disabled again; and the
// insert as the owner (no policy applies to it). Rounds interleaved,
// medians compared:
//
//	RESULT rls_vs_grants=<x> rls_vs_owner=<y> lookup_rls_vs_grants=<z> ...
//
// Run with DEDUP_BENCH=1 go test -run TestRLSCostReport -v ./consumer/dedup/
// (DEDUP_BENCH_ROUNDS sets the rounds, default 30).
func TestRLSCostReport(t *testing.T) {
	if os.Getenv(EnvBench) == "" {
		t.Skip("set " + EnvBench + "=1 to run")
	}
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	r.grant(t, "g1")
	plainTbl := r.tbl
	plainTbl.Name = "plain"
	plain := newEngine(t, r.ownerDB, plainTbl)
	if _, err := plain.Maintain(ctx, r.now, r.premake, r.retention); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.GrantConsumer(ctx, r.consumer.Name, "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ownerDB.Exec(ctx, "ALTER TABLE app.plain DISABLE ROW LEVEL SECURITY"); err != nil {
		t.Fatal(err)
	}
	inRLS, err := NewInserter(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	inPlain, err := NewInserter(plainTbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	newIDs := func() []uuid.UUID {
		ids := make([]uuid.UUID, 500)
		for i := range ids {
			ids[i] = idAt(r.now)
		}
		return ids
	}
	batch := func(pool *pgxpool.Pool, in *Inserter) float64 {
		// The statement alone: the commit's fsync, the same for all, would
		// drown the difference in this machine's noise.
		ids := newIDs()
		var took time.Duration
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			start := time.Now()
			got, err := in.Insert(ctx, tx, ids)
			took = time.Since(start)
			if err == nil && !got.Fresh[0] {
				err = fmt.Errorf("not fresh: %+v", got)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return ms(took)
	}
	lookup := func(in *Inserter, ids []uuid.UUID) float64 {
		start := time.Now()
		rec, _, err := in.Recorded(ctx, r.consDB, ids)
		if err != nil {
			t.Fatal(err)
		}
		if !rec[0] {
			t.Fatal("recorded id not found")
		}
		return ms(time.Since(start))
	}
	// Warm up the pools, the plan caches and the window caches.
	for range 5 {
		batch(r.ownerDB, inRLS)
		batch(r.consDB, inRLS)
		batch(r.consDB, inPlain)
	}
	rlsIDs, plainIDs := newIDs(), newIDs()
	insertCommit(t, r.consDB, inRLS, rlsIDs...)
	insertCommit(t, r.consDB, inPlain, plainIDs...)
	rounds := benchEnvInt(t, EnvBenchRounds, 30, 5)
	var owner, ownerPlain, grants, rls, lookGrants, lookRLS []float64
	for i := range rounds {
		// Each round in another order: what runs first after a pause
		// is slower on a busy machine.
		steps := []func(){
			func() { grants = append(grants, batch(r.consDB, inPlain)) },
			func() { rls = append(rls, batch(r.consDB, inRLS)) },
			func() { owner = append(owner, batch(r.ownerDB, inRLS)) },
			func() { ownerPlain = append(ownerPlain, batch(r.ownerDB, inPlain)) },
			func() { lookGrants = append(lookGrants, lookup(inPlain, plainIDs)) },
			func() { lookRLS = append(lookRLS, lookup(inRLS, rlsIDs)) },
		}
		for j := range steps {
			steps[(i+j)%len(steps)]()
		}
	}
	// The same table and role, row security switched between blocks of
	// rounds; the first batch after a switch, which plans again, is not
	// counted.
	var on, off []float64
	for b := range 6 {
		verb, into := "ENABLE", &on
		if b%2 == 1 {
			verb, into = "DISABLE", &off
		}
		if _, err := r.ownerDB.Exec(ctx, "ALTER TABLE app.processed_event "+verb+" ROW LEVEL SECURITY"); err != nil {
			t.Fatal(err)
		}
		batch(r.consDB, inRLS)
		for range max(rounds/3, 3) {
			*into = append(*into, batch(r.consDB, inRLS))
		}
	}
	if _, err := r.ownerDB.Exec(ctx, "ALTER TABLE app.processed_event ENABLE ROW LEVEL SECURITY"); err != nil {
		t.Fatal(err)
	}
	// The policy's condition joins the lookup's own (consumer_group is in
	// both), so the plan is the one without it: the same index scan.
	if _, err := r.admin.Exec(ctx, "ANALYZE app.processed_event; ANALYZE app.plain"); err != nil {
		t.Fatal(err)
	}
	explain := func(in *Inserter, ids []uuid.UUID) string {
		t.Helper()
		rows, err := r.consDB.Query(ctx, "EXPLAIN (COSTS OFF) "+in.recordedSQL(), ids[:3], "g1")
		var plan []string
		if err == nil {
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(plan, "\n")
	}
	planGrants, planRLS := explain(inPlain, plainIDs), explain(inRLS, rlsIDs)
	t.Logf("lookup plan, grants only:\n%s\nlookup plan under the policy:\n%s", planGrants, planRLS)
	if !strings.Contains(planRLS, "Index") {
		t.Errorf("the lookup under the policy does not use the primary key index")
	}
	fmt.Printf("RESULT switched_on_vs_off=%.3f on_ms=%.2f off_ms=%.2f\n", median(on)/median(off), median(on), median(off))
	fmt.Printf("RESULT rls_vs_grants=%.3f rls_vs_owner=%.3f grants_vs_owner_plain=%.3f lookup_rls_vs_grants=%.3f owner_ms=%.2f owner_plain_ms=%.2f grants_ms=%.2f rls_ms=%.2f lookup_grants_ms=%.2f lookup_rls_ms=%.2f rounds=%d batch=500\n",
		median(rls)/median(grants), median(rls)/median(owner), median(grants)/median(ownerPlain), median(lookRLS)/median(lookGrants),
		median(owner), median(ownerPlain), median(grants), median(rls), median(lookGrants), median(lookRLS), rounds)
}
