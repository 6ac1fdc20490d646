package dedup

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// roles is a database with the two roles of a production setup: the
// operator's (owner of the schema "app", so of everything it creates there)
// and the consumer's (a plain login role), each with a pool of its own, and
// the superuser's pool for setting up and for looking behind the policies.
type roles struct {
	admin           *pgxpool.Pool
	owner, consumer consumertest.Role
	ownerDB, consDB *pgxpool.Pool
	eng             *Engine
	tbl             Table
	now             time.Time
	premake         int
	retention       time.Duration
}

func newRoles(t *testing.T, scope Scope) *roles {
	t.Helper()
	ctx := testCtx(t)
	r := &roles{admin: newPool(t), now: time.Now().UTC(), premake: 2, retention: 48 * time.Hour}
	dbURL := r.admin.Config().ConnString()
	r.owner = consumertest.NewRole(t, dbURL, "operator")
	r.consumer = consumertest.NewRole(t, dbURL, "consumer")
	if _, err := r.admin.Exec(ctx, "CREATE SCHEMA app AUTHORIZATION "+pgx.Identifier{r.owner.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	r.ownerDB = rolePool(t, r.owner.URL)
	r.consDB = rolePool(t, r.consumer.URL)
	r.tbl = Table{Schema: "app", Scope: scope, Interval: Daily}.WithDefaults()
	r.eng = newEngine(t, r.ownerDB, r.tbl)
	if _, err := r.eng.Maintain(ctx, r.now, r.premake, r.retention); err != nil {
		t.Fatalf("Maintain: %v", err)
	}
	return r
}

func rolePool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func (r *roles) grant(t *testing.T, group string) GrantResult {
	t.Helper()
	res, err := r.eng.GrantConsumer(testCtx(t), r.consumer.Name, group)
	if err != nil {
		t.Fatalf("GrantConsumer(%s): %v", group, err)
	}
	return res
}

// sqlstate runs sql as the consumer in a transaction that is rolled back,
// and returns the SQLSTATE it failed with ("" when it succeeded) and the
// rows it affected.
func sqlstate(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) (code, msg string, rows int64) {
	t.Helper()
	ctx := testCtx(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, sql, args...)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return "", "", tag.RowsAffected()
	case errors.As(err, &pgErr):
		return pgErr.Code, pgErr.Message, 0
	}
	t.Fatalf("%s: %v", sql, err)
	return "", "", 0
}

// TestConsumerRoleRefusals: after GrantConsumer, the consumer's role runs
// every statement of the runtime (insert, duplicate, lookup, forget,
// positions, the start-up checks, the durability check), and is refused
// everything that would let it destroy or rewrite what it depends on: each
// refusal with its SQLSTATE, and the statements that row-level security
// filters instead of refusing with the rows they did not touch.
func TestConsumerRoleRefusals(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	// Another group's rows, written by the owner before the grant.
	other, err := NewInserter(r.tbl, "g2")
	if err != nil {
		t.Fatal(err)
	}
	otherID := idAt(r.now)
	insertCommit(t, r.ownerDB, other, otherID)
	otherPos, err := NewPositions(r.tbl, "g2")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := otherPos.Record(ctx, r.ownerDB, "events", 0, 100); err != nil {
		t.Fatal(err)
	}

	// Before the grant the consumer can do nothing at all.
	if code, msg, _ := sqlstate(t, r.consDB, `SELECT 1 FROM app.processed_event LIMIT 1`); code != "42501" {
		t.Fatalf("before the grant: SELECT gave %q %s, want 42501", code, msg)
	}
	res := r.grant(t, "g1")
	if res.Unrestricted != "" || len(res.Statements) == 0 {
		t.Fatalf("first grant: %+v", res)
	}
	for _, s := range res.Statements {
		t.Logf("granted: %s", s)
	}

	// The runtime's statements, as the consumer.
	in, err := NewInserter(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	id, dropped := idAt(r.now), idAt(r.now)
	if got := insertCommit(t, r.consDB, in, id, id); !got.Fresh[0] || got.Fresh[1] {
		t.Fatalf("insert as the consumer: %+v", got)
	}
	if got := insertCommit(t, r.consDB, in, id); got.Fresh[0] {
		t.Fatalf("duplicate not detected as the consumer: %+v", got)
	}
	recorded, _, err := in.Recorded(ctx, r.consDB, []uuid.UUID{id, otherID})
	if err != nil {
		t.Fatalf("Recorded as the consumer: %v", err)
	}
	if !recorded[0] || recorded[1] {
		t.Fatalf("Recorded as the consumer: %v, want [true false] (g2's row is not g1's key)", recorded)
	}
	err = pgx.BeginFunc(ctx, r.consDB, func(tx pgx.Tx) error {
		if _, err := in.Insert(ctx, tx, []uuid.UUID{dropped}); err != nil {
			return err
		}
		return in.Forget(ctx, tx, dropped)
	})
	if err != nil {
		t.Fatalf("insert and forget as the consumer: %v", err)
	}
	pos, err := NewPositions(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if err := pos.Check(ctx, r.consDB); err != nil {
		t.Fatalf("positions check as the consumer: %v", err)
	}
	for _, next := range []int64{7, 9} {
		if err := pgx.BeginFunc(ctx, r.consDB, func(tx pgx.Tx) error {
			_, _, err := pos.Record(ctx, tx, "events", 0, next)
			return err
		}); err != nil {
			t.Fatalf("recording position %d as the consumer: %v", next, err)
		}
	}
	if got, ok, err := pos.Read(ctx, r.consDB, "events", 0); err != nil || !ok || got != 9 {
		t.Fatalf("reading the position as the consumer: %d %v %v", got, ok, err)
	}
	if err := CheckScope(ctx, r.consDB, r.tbl); err != nil {
		t.Fatalf("scope check as the consumer: %v", err)
	}
	if _, err := ReadDurability(ctx, r.consDB); err != nil {
		t.Fatalf("durability check as the consumer: %v", err)
	}

	part := r.eng.Table().Interval.partition(r.tbl.Name, r.eng.Table().Interval.Floor(r.now)).Name
	p := "app." + part
	lo, _ := r.eng.Table().Interval.partition(r.tbl.Name, r.eng.Table().Interval.Floor(r.now)).Bounds()
	later := r.eng.Table().Interval.partition(r.tbl.Name, r.eng.Table().Interval.Floor(r.now).AddDate(1, 0, 0))
	llo, lhi := later.Bounds()
	scratch := "scratch_" + strings.TrimPrefix(r.consumer.Name, "consumer_")
	if _, err := r.admin.Exec(ctx, "CREATE SCHEMA "+scratch+" AUTHORIZATION "+pgx.Identifier{r.consumer.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.consDB.Exec(ctx, "CREATE TABLE "+scratch+".own (LIKE app.processed_event)"); err != nil {
		t.Fatalf("the consumer's own table in its own schema: %v", err)
	}
	policy := policyName(r.consumer.Name, "g1")
	refused := []struct{ what, sql string }{
		{"DROP TABLE", `DROP TABLE app.processed_event`},
		{"TRUNCATE", `TRUNCATE app.processed_event`},
		{"ALTER TABLE (add a column)", `ALTER TABLE app.processed_event ADD COLUMN x int`},
		{"ALTER TABLE (disable row-level security)", `ALTER TABLE app.processed_event DISABLE ROW LEVEL SECURITY`},
		{"DROP POLICY (its own)", `DROP POLICY ` + policy + ` ON app.processed_event`},
		{"CREATE POLICY", `CREATE POLICY mine ON app.processed_event USING (true)`},
		{"COMMENT ON TABLE (the ownership marker)", `COMMENT ON TABLE app.processed_event IS '{"idempotency.dev/owner":"someone-else"}'`},
		{"COMMENT ON TABLE (a partition's marker)", `COMMENT ON TABLE ` + p + ` IS NULL`},
		{"COMMENT ON TABLE (the positions marker)", `COMMENT ON TABLE app.processed_event_offsets IS NULL`},
		{"write the marker in pg_description", `UPDATE pg_catalog.pg_description SET description = '{}' WHERE objoid = 'app.processed_event'::regclass`},
		{"CREATE TABLE ... PARTITION OF (in the schema)", fmt.Sprintf(`CREATE TABLE app.%s PARTITION OF app.processed_event FOR VALUES FROM ('%s') TO ('%s')`, later.Name, llo, lhi)},
		{"CREATE TABLE ... PARTITION OF (from its own schema)", fmt.Sprintf(`CREATE TABLE %s.p PARTITION OF app.processed_event FOR VALUES FROM ('%s') TO ('%s')`, scratch, llo, lhi)},
		{"ATTACH PARTITION (its own table)", fmt.Sprintf(`ALTER TABLE app.processed_event ATTACH PARTITION %s.own FOR VALUES FROM ('%s') TO ('%s')`, scratch, llo, lhi)},
		{"DETACH PARTITION", `ALTER TABLE app.processed_event DETACH PARTITION ` + p},
		{"DROP TABLE (a partition)", `DROP TABLE ` + p},
		{"TRUNCATE (a partition)", `TRUNCATE ` + p},
		{"SELECT (a partition directly)", `SELECT 1 FROM ` + p},
		{"DELETE (a partition directly)", `DELETE FROM ` + p},
		{"INSERT (a partition directly)", fmt.Sprintf(`INSERT INTO %s (event_id, consumer_group) VALUES ('%s', 'g2')`, p, lo)},
		{"UPDATE (move a row to another group)", `UPDATE app.processed_event SET consumer_group = 'g2'`},
		{"INSERT a row of another group", `INSERT INTO app.processed_event (event_id, consumer_group) VALUES ($1, 'g2')`},
		{"DROP TABLE (positions)", `DROP TABLE app.processed_event_offsets`},
		{"TRUNCATE (positions)", `TRUNCATE app.processed_event_offsets`},
		{"DELETE (positions)", `DELETE FROM app.processed_event_offsets`},
		{"INSERT a position of another group", `INSERT INTO app.processed_event_offsets (consumer_group, topic, kafka_partition, next_offset) VALUES ('g2', 'events', 1, 0)`},
		{"SET ROLE (the owner)", `SET ROLE ` + pgx.Identifier{r.owner.Name}.Sanitize()},
	}
	t.Log("| statement, as the consumer's role | SQLSTATE | message |")
	t.Log("| --- | --- | --- |")
	for _, c := range refused {
		var args []any
		if strings.Contains(c.sql, "$1") {
			args = append(args, idAt(r.now))
		}
		code, msg, _ := sqlstate(t, r.consDB, c.sql, args...)
		t.Logf("| %s | %s | %s |", c.what, code, msg)
		if code != "42501" {
			t.Errorf("%s: SQLSTATE %q (%s), want 42501 insufficient_privilege", c.what, code, msg)
		}
	}
	// GRANT by a role without the grant option is a WARNING, not an error:
	// what matters is that nothing was granted.
	if code, msg, _ := sqlstate(t, r.consDB, `GRANT TRUNCATE ON app.processed_event TO CURRENT_USER`); code != "" {
		t.Errorf("GRANT without the grant option: %q %s, want a warning only", code, msg)
	}
	code, msg, _ := sqlstate(t, r.consDB, `LOCK TABLE app.processed_event IN ACCESS EXCLUSIVE MODE`)
	t.Logf("LOCK TABLE ... ACCESS EXCLUSIVE: %q %s", code, msg)
	var canTruncate bool
	if err := r.admin.QueryRow(ctx, `SELECT has_table_privilege($1, 'app.processed_event', 'TRUNCATE')`, r.consumer.Name).Scan(&canTruncate); err != nil || canTruncate {
		t.Errorf("the consumer granted itself TRUNCATE: %v %v", canTruncate, err)
	}

	// Row-level security filters instead of refusing: nothing of g2 is seen
	// or touched.
	filtered := []struct{ what, sql string }{
		{"SELECT another group's rows", `SELECT FROM app.processed_event WHERE consumer_group = 'g2'`},
		{"DELETE another group's rows", `DELETE FROM app.processed_event WHERE consumer_group = 'g2'`},
		{"DELETE another group's row by key", `DELETE FROM app.processed_event WHERE event_id = $1`},
		{"SELECT another group's positions", `SELECT FROM app.processed_event_offsets WHERE consumer_group = 'g2'`},
		{"UPDATE another group's positions", `UPDATE app.processed_event_offsets SET next_offset = 0 WHERE consumer_group = 'g2'`},
	}
	for _, c := range filtered {
		var args []any
		if strings.Contains(c.sql, "$1") {
			args = append(args, otherID)
		}
		code, msg, n := sqlstate(t, r.consDB, c.sql, args...)
		t.Logf("| %s | (none: %d rows) | |", c.what, n)
		if code != "" || n != 0 {
			t.Errorf("%s: SQLSTATE %q %s, %d rows; want no error and 0 rows", c.what, code, msg, n)
		}
	}
	var n int
	if err := r.admin.QueryRow(ctx, `SELECT count(*) FROM app.processed_event WHERE event_id = $1 AND consumer_group = 'g2'`, otherID).Scan(&n); err != nil || n != 1 {
		t.Errorf("g2's row: %d rows, %v; want it kept", n, err)
	}
	if got, ok, err := otherPos.Read(ctx, r.admin, "events", 0); err != nil || !ok || got != 100 {
		t.Errorf("g2's position: %d %v %v; want 100 kept", got, ok, err)
	}
	// The owner still sees everything (the policies bind the consumer's
	// role only), and the marker is intact.
	if got := countRows(t, r.ownerDB, "app.processed_event"); got != 2 {
		t.Errorf("the owner sees %d rows, want 2 (g1's and g2's)", got)
	}
	if st, err := r.eng.Observe(ctx); err != nil || st.Owner != testOwner {
		t.Errorf("marker after the refusals: %q %v", st.Owner, err)
	}
}

// TestConsumerRoleLaterPartitions: a partition Maintain creates after the
// grant is usable by the consumer's role at once (privileges are checked on
// the parent the statement names), and gets no privilege of its own, so the
// role still cannot touch it directly.
func TestConsumerRoleLaterPartitions(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	r.grant(t, "g1")
	later := r.now.Add(10 * 24 * time.Hour)
	mres, err := r.eng.Maintain(ctx, later, r.premake, r.retention)
	if err != nil {
		t.Fatalf("Maintain later: %v", err)
	}
	if len(mres.Created) == 0 {
		t.Fatal("Maintain later created nothing")
	}
	newest := mres.Created[len(mres.Created)-1]
	in, err := NewInserter(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	id := idAt(newest.From.Add(time.Hour))
	if got := insertCommit(t, r.consDB, in, id); !got.Fresh[0] {
		t.Fatalf("insert into the partition made after the grant: %+v (window %v)", got, got.Window)
	}
	var where string
	if err := r.admin.QueryRow(ctx, `SELECT tableoid::regclass::text FROM app.processed_event WHERE event_id = $1`, id).Scan(&where); err != nil || where != "app."+newest.Name {
		t.Fatalf("row landed in %q (%v), want app.%s", where, err, newest.Name)
	}
	if code, msg, _ := sqlstate(t, r.consDB, `SELECT 1 FROM app.`+newest.Name); code != "42501" {
		t.Errorf("direct SELECT on the new partition: %q %s, want 42501", code, msg)
	}
	// A second grant finds everything in place: no statement, no lock.
	if res := r.grant(t, "g1"); len(res.Statements) != 0 {
		t.Errorf("second grant ran %v, want nothing", res.Statements)
	}
}

// TestConsumerRoleGlobalScope: under ScopeGlobal the key is the event id
// alone: every group sees every row (an id any group recorded is a
// duplicate for all), so no policy is put on the dedup table; positions are
// still per group.
func TestConsumerRoleGlobalScope(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeGlobal)
	other, err := NewInserter(r.tbl, "g2")
	if err != nil {
		t.Fatal(err)
	}
	otherID := idAt(r.now)
	insertCommit(t, r.ownerDB, other, otherID)
	res := r.grant(t, "g1")
	for _, s := range res.Statements {
		if strings.Contains(s, "ON app.processed_event ") && strings.Contains(s, "POLICY") {
			t.Errorf("a policy on the Global dedup table: %s", s)
		}
	}
	in, err := NewInserter(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if got := insertCommit(t, r.consDB, in, otherID); got.Fresh[0] {
		t.Fatalf("g2's id is fresh for g1 under scope Global: %+v", got)
	}
	if code, msg, _ := sqlstate(t, r.consDB, `INSERT INTO app.processed_event_offsets (consumer_group, topic, kafka_partition, next_offset) VALUES ('g2', 'events', 1, 0)`); code != "42501" {
		t.Errorf("a position of another group under scope Global: %q %s, want 42501", code, msg)
	}
	for _, c := range []string{`DROP TABLE app.processed_event`, `TRUNCATE app.processed_event`, `COMMENT ON TABLE app.processed_event IS NULL`} {
		if code, msg, _ := sqlstate(t, r.consDB, c); code != "42501" {
			t.Errorf("%s: %q %s, want 42501", c, code, msg)
		}
	}
	pos, err := NewPositions(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pos.Record(ctx, r.consDB, "events", 0, 3); err != nil {
		t.Fatalf("recording a position: %v", err)
	}
}

// TestConsumerRoleSharedByGroups: one role for two groups gets both
// groups' rows (the policies add up) and no third group's.
func TestConsumerRoleSharedByGroups(t *testing.T) {
	r := newRoles(t, ScopeConsumerGroup)
	r.grant(t, "g1")
	r.grant(t, "g3")
	for _, g := range []string{"g1", "g3"} {
		in, err := NewInserter(r.tbl, g)
		if err != nil {
			t.Fatal(err)
		}
		if got := insertCommit(t, r.consDB, in, idAt(r.now)); !got.Fresh[0] {
			t.Errorf("group %s: %+v", g, got)
		}
	}
	if code, msg, _ := sqlstate(t, r.consDB, `INSERT INTO app.processed_event (event_id, consumer_group) VALUES ($1, 'g2')`, idAt(r.now)); code != "42501" {
		t.Errorf("a third group's row: %q %s, want 42501", code, msg)
	}
}

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

// TestConsumerRoleClaimFunction: with EXECUTE taken from PUBLIC, the
// consumer's role may call the table's claim function only after the grant,
// and then only for its own group (the function runs with the caller's
// rights, so the group policy holds inside it too).
func TestConsumerRoleClaimFunction(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	var installed bool
	if err := r.ownerDB.QueryRow(ctx, `SELECT to_regprocedure('app.processed_event_claim(uuid[], text)') IS NOT NULL`).Scan(&installed); err != nil {
		t.Fatal(err)
	}
	if !installed {
		t.Fatal("EnsureTable installed no claim function")
	}
	if _, err := r.ownerDB.Exec(ctx, `REVOKE EXECUTE ON FUNCTION app.processed_event_claim(uuid[], text), app.processed_event_claim_one(uuid, text) FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	id := idAt(r.now)
	claim := `SELECT verdict FROM app.processed_event_claim(ARRAY[$1::uuid], $2)`
	if code, msg, _ := sqlstate(t, r.consDB, claim, id, "g1"); code != "42501" {
		t.Fatalf("claim before the grant: %q %s, want 42501", code, msg)
	}
	res := r.grant(t, "g1")
	granted := 0
	for _, s := range res.Statements {
		if strings.HasPrefix(s, "GRANT EXECUTE ON FUNCTION") {
			granted++
		}
	}
	if granted != 2 {
		t.Errorf("EXECUTE granted on %d claim functions, want 2: %v", granted, res.Statements)
	}
	var verdicts []string
	for range 2 {
		var v string
		if err := pgx.BeginFunc(ctx, r.consDB, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT app.processed_event_claim_one($1, 'g1')`, id).Scan(&v)
		}); err != nil {
			t.Fatalf("claim as the consumer: %v", err)
		}
		verdicts = append(verdicts, v)
	}
	if !slices.Equal(verdicts, []string{"new", "duplicate"}) {
		t.Errorf("verdicts %v, want [new duplicate]", verdicts)
	}
	if code, msg, _ := sqlstate(t, r.consDB, claim, idAt(r.now), "g2"); code != "42501" {
		t.Errorf("claim for another group: %q %s, want 42501", code, msg)
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
