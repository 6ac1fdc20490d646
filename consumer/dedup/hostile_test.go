package dedup

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/jackc/pgx/v5"
)

// TestGrantConsumer_EscalationIsUnrestricted: a consumer role that can make
// itself more than a tenant is reported as unrestricted, like a superuser, a
// BYPASSRLS role or the owner: one with CREATEROLE (on PostgreSQL 15 and
// older it may GRANT the owner's role to itself), and one that is a member,
// through other roles, of a superuser, a BYPASSRLS role or the owner.
func TestGrantConsumer_EscalationIsUnrestricted(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	dbURL := r.admin.Config().ConnString()
	var version int
	if err := r.admin.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	id := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	// nested makes a plain login role that is a member of top through one
	// role in between.
	nested := func(prefix, top string) string {
		middle := consumertest.NewRole(t, dbURL, prefix+"_mid")
		leaf := consumertest.NewRole(t, dbURL, prefix)
		if _, err := r.admin.Exec(ctx, "GRANT "+id(top)+" TO "+id(middle.Name)+"; GRANT "+id(middle.Name)+" TO "+id(leaf.Name)); err != nil {
			t.Fatal(err)
		}
		return leaf.Name
	}
	super := consumertest.NewRole(t, dbURL, "super", "SUPERUSER")
	bypass := consumertest.NewRole(t, dbURL, "bypass", "BYPASSRLS")
	cases := []struct {
		name, role, want string
	}{
		{"member of a superuser, two levels down", nested("in_super", super.Name), "superuser"},
		{"member of a BYPASSRLS role, two levels down", nested("in_bypass", bypass.Name), "BYPASSRLS"},
		{"member of the owner, two levels down", nested("in_owner", r.owner.Name), "owns the table"},
	}
	if version < 160000 {
		cases = append(cases, struct{ name, role, want string }{"CREATEROLE", consumertest.NewRole(t, dbURL, "creator", "CREATEROLE").Name, "CREATEROLE"})
	} else {
		t.Log("PostgreSQL 16 or later: CREATEROLE no longer grants roles without ADMIN OPTION; that case is not run")
	}
	for i, c := range cases {
		res, err := r.eng.GrantConsumer(ctx, c.role, "g"+string(rune('a'+i)))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !strings.Contains(res.Unrestricted, c.want) {
			t.Errorf("%s: reported as separated (Unrestricted %q), want it unrestricted naming %q", c.name, res.Unrestricted, c.want)
		} else {
			t.Logf("%s: %s", c.name, res.Unrestricted)
		}
	}
	// A plain role that is a member of an ordinary role stays separated.
	plainParent := consumertest.NewRole(t, dbURL, "plain_parent")
	if res, err := r.eng.GrantConsumer(ctx, nested("in_plain", plainParent.Name), "gz"); err != nil || res.Unrestricted != "" {
		t.Errorf("member of a plain role: %+v %v, want it separated", res, err)
	}
}

// TestSearchPathHijack: on a database where every role may create in
// public (PostgreSQL 14's default, emulated), a consumer role plants
// look-alike functions and operators in public, in the table's schema and
// in a schema named after the owner (first on the default search_path
// "$user", public). They record who ran them. Nothing of theirs may run
// when the owner creates, maintains, grants and revokes, nor when another
// tenant's role runs the runtime's checks.
func TestSearchPathHijack(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	dbURL := r.admin.Config().ConnString()
	id := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	cons := id(r.consumer.Name)
	if _, err := r.admin.Exec(ctx, "GRANT CREATE ON SCHEMA public TO PUBLIC; GRANT USAGE, CREATE ON SCHEMA app TO "+cons+
		"; GRANT CREATE ON DATABASE "+id(r.admin.Config().ConnConfig.Database)+" TO "+cons); err != nil {
		t.Fatal(err)
	}
	plant := func(schema string) string {
		s := id(schema)
		return strings.NewReplacer("S.", s+".").Replace(`
CREATE FUNCTION S.obj_description(oid, text) RETURNS text LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.obj_description'); SELECT pg_catalog.obj_description($1, $2::name) $$;
CREATE FUNCTION S.quote_ident(text) RETURNS text LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.quote_ident'); SELECT pg_catalog.quote_ident($1) $$;
CREATE FUNCTION S.quote_ident(name) RETURNS text LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.quote_ident(name)'); SELECT pg_catalog.quote_ident($1) $$;
CREATE FUNCTION S.left(text, bigint) RETURNS text LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.left'); SELECT pg_catalog.left($1, $2::int) $$;
CREATE FUNCTION S.left(name, integer) RETURNS text LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.left(name)'); SELECT pg_catalog.left($1::text, $2) $$;
CREATE FUNCTION S.length(name) RETURNS integer LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.length(name)'); SELECT pg_catalog.length($1::text) $$;
CREATE FUNCTION S.format_type(oid, bigint) RETURNS text LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.format_type'); SELECT pg_catalog.format_type($1, $2::int) $$;
CREATE FUNCTION S.pg_has_role(oid, oid, varchar) RETURNS boolean LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.pg_has_role'); SELECT pg_catalog.pg_has_role($1, $2, $3::text) $$;
CREATE FUNCTION S.has_table_privilege(oid, oid, varchar) RETURNS boolean LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.has_table_privilege'); SELECT pg_catalog.has_table_privilege($1, $2, $3::text) $$;
CREATE FUNCTION S.has_schema_privilege(oid, name, varchar) RETURNS boolean LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.has_schema_privilege'); SELECT pg_catalog.has_schema_privilege($1, $2::text, $3::text) $$;
CREATE FUNCTION S.name_eq_varchar(name, varchar) RETURNS boolean LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.=(name,varchar)'); SELECT $1::text = $2::text $$;
CREATE OPERATOR S.= (LEFTARG = name, RIGHTARG = varchar, FUNCTION = S.name_eq_varchar);
CREATE FUNCTION S.char_eq_varchar("char", varchar) RETURNS boolean LANGUAGE sql AS
  $$ INSERT INTO public.hijack_log VALUES (current_user, 'S.=("char",varchar)'); SELECT $1::text = $2::text $$;
CREATE OPERATOR S.= (LEFTARG = "char", RIGHTARG = varchar, FUNCTION = S.char_eq_varchar);
`)
	}
	ownerSchema := r.owner.Name
	consDB := rolePool(t, r.consumer.URL)
	if _, err := consDB.Exec(ctx, "CREATE TABLE public.hijack_log (who text, what text); GRANT INSERT ON public.hijack_log TO PUBLIC;"+
		"CREATE SCHEMA "+id(ownerSchema)+"; GRANT USAGE ON SCHEMA "+id(ownerSchema)+" TO PUBLIC;"+
		plant("public")+plant("app")+plant(ownerSchema)); err != nil {
		t.Fatalf("planting: %v", err)
	}

	// The owner's work, on connections opened after the planting (a
	// statement prepared before keeps its plan): create another table,
	// maintain, grant, revoke, drop.
	r.ownerDB = rolePool(t, r.owner.URL)
	eng, err := NewEngine(r.ownerDB, r.tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	r.eng = eng
	now := r.now.Add(72 * time.Hour)
	if _, err := r.eng.Maintain(ctx, now, r.premake, r.retention); err != nil {
		t.Errorf("Maintain: %v", err)
	}
	if _, err := r.eng.Observe(ctx); err != nil {
		t.Errorf("Observe: %v", err)
	}
	other := consumertest.NewRole(t, dbURL, "tenant")
	if _, err := r.eng.GrantConsumer(ctx, other.Name, "g2"); err != nil {
		t.Errorf("GrantConsumer: %v", err)
	}
	if _, err := r.eng.GrantConsumer(ctx, r.consumer.Name, "g1"); err != nil {
		t.Errorf("GrantConsumer: %v", err)
	}
	// The other tenant's runtime checks, as the other tenant.
	otherDB := rolePool(t, other.URL)
	if err := CheckAccess(ctx, otherDB, r.tbl, "g2", true); err != nil {
		t.Errorf("CheckAccess: %v", err)
	}
	if pos, err := NewPositions(r.tbl, "g2"); err != nil {
		t.Fatal(err)
	} else if err := pos.Check(ctx, otherDB); err != nil {
		t.Errorf("Positions.Check: %v", err)
	}
	in, err := NewInserter(r.tbl, "g2")
	if err != nil {
		t.Fatal(err)
	}
	insertCommit(t, otherDB, in, idAt(r.now))
	if _, err := r.eng.RevokeConsumer(ctx, other.Name, "g2"); err != nil {
		t.Errorf("RevokeConsumer: %v", err)
	}
	tbl2 := Table{Schema: "app", Name: "second_event", Scope: ScopeGlobal, Interval: Daily}
	eng2 := newEngine(t, r.ownerDB, tbl2)
	if _, err := eng2.Maintain(ctx, r.now, 1, r.retention); err != nil {
		t.Errorf("Maintain of a new table: %v", err)
	}
	if err := eng2.DropTable(ctx, testOwner); err != nil {
		t.Errorf("Drop: %v", err)
	}

	rows, err := r.admin.Query(ctx, "SELECT who, what, count(*) FROM public.hijack_log GROUP BY 1, 2 ORDER BY 1, 2")
	if err != nil {
		t.Fatal(err)
	}
	type ran struct {
		Who, What string
		N         int
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ran])
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		t.Errorf("the consumer's planted %s ran as %s (%d times)", g.What, g.Who, g.N)
	}
}

// legacyLockKey is the advisory-lock key the engine used to take: a hash of
// the table's name that anyone can compute.
func legacyLockKey(tbl Table) int64 {
	h := fnv.New64a()
	h.Write([]byte("idempotency.dev/dedup\x00" + tbl.Schema + "\x00" + tbl.Name))
	return int64(h.Sum64())
}

// TestMaintainLockSquatting: a role that can merely connect holds the
// advisory lock any maintainer used to take (its key is a hash of the
// table's name); maintenance must go on. A maintainer that holds the
// table's real lock still blocks the next, and the error names it.
func TestMaintainLockSquatting(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	squatter, err := pgx.Connect(ctx, r.consumer.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = squatter.Close(context.Background()) })
	if _, err := squatter.Exec(ctx, "SELECT pg_advisory_lock($1)", legacyLockKey(r.tbl)); err != nil {
		t.Fatal(err)
	}
	eng, err := NewEngine(r.ownerDB, r.tbl, WithAdvisoryLockWait(500*time.Millisecond), WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, testOwner); err != nil {
		t.Fatalf("EnsureTable while another role holds the name's hash: %v", err)
	}
	if _, err := eng.Maintain(ctx, r.now, r.premake, r.retention); err != nil {
		t.Fatalf("Maintain while another role holds the name's hash: %v", err)
	}
	if _, err := eng.GrantConsumer(ctx, r.consumer.Name, "g1"); err != nil {
		t.Fatalf("GrantConsumer while another role holds the name's hash: %v", err)
	}

	// A legitimate holder: another maintainer's session, as the owner.
	cfg, err := pgx.ParseConfig(r.owner.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "other-maintainer"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	var key int64
	if err := holder.QueryRow(ctx, "SELECT key FROM "+pgx.Identifier{r.tbl.Schema, r.tbl.Name + "_lock"}.Sanitize()).Scan(&key); err != nil {
		t.Fatalf("reading the lock key as the owner: %v", err)
	}
	var pid int
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) l", key).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	_, err = eng.Maintain(ctx, r.now, r.premake, r.retention)
	if !errors.Is(err, ErrLockNotAvailable) {
		t.Fatalf("Maintain while another maintainer holds the lock: %v, want ErrLockNotAvailable", err)
	}
	for _, want := range []string{"pid " + strconv.Itoa(pid), r.owner.Name, "other-maintainer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Maintain's error %q does not name the holder (%q)", err, want)
		}
	}
	t.Logf("blocked: %v", err)
	// The consumer's role cannot read the key.
	if code, _, _ := sqlstate(t, r.consDB, "SELECT key FROM "+pgx.Identifier{r.tbl.Schema, r.tbl.Name + "_lock"}.Sanitize()); code != "42501" {
		t.Errorf("the consumer reading the lock key: SQLSTATE %q, want 42501", code)
	}
}

// TestMaintainLockKeyReadFromPgLocks: the lock key is unknown to other
// roles in the lock table, but every role can read it from pg_locks while a
// maintainer holds it. A squatter that read it there and holds it once the
// maintainer let go must block nothing: each maintainer draws a new key
// before it lets the lock go. Before, the second Maintain failed with
// ErrLockNotAvailable, naming the squatter, forever.
func TestMaintainLockKeyReadFromPgLocks(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	eng, err := NewEngine(r.ownerDB, r.tbl, WithAdvisoryLockWait(500*time.Millisecond), WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	squatter, err := pgx.Connect(ctx, r.consumer.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = squatter.Close(context.Background()) })

	// A maintenance in progress: the engine's own session holds the lock.
	conn, release, err := eng.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen int64
	if err := squatter.QueryRow(ctx, `SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 1 AND pid = $1`, int(conn.PgConn().PID())).Scan(&seen); err != nil {
		t.Fatalf("the squatter reading the maintainer's advisory lock from pg_locks: %v", err)
	}
	release()
	var got bool
	if err := squatter.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", seen).Scan(&got); err != nil || !got {
		t.Fatalf("the squatter taking the key it read: %v %v", got, err)
	}
	if _, err := eng.Maintain(ctx, r.now, r.premake, r.retention); err != nil {
		t.Fatalf("Maintain while another role holds the key it read from pg_locks: %v", err)
	}
	if _, err := eng.GrantConsumer(ctx, r.consumer.Name, "g1"); err != nil {
		t.Fatalf("GrantConsumer while another role holds the key it read from pg_locks: %v", err)
	}
}
