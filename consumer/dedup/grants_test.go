package dedup

import (
	"errors"
	"fmt"
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
