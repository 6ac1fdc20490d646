package dedup

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The consumer's role. The operator's role owns the table (it runs the DDL);
// the consumer connects as a role of its own that may only do what the
// runtime does: read and write rows through the parent table, read and write
// its group's positions, call the claim function. GrantConsumer gives it
// exactly that and nothing else:
//
//   - USAGE on the schema (when the role does not have it already);
//   - SELECT, INSERT, DELETE on the dedup table (the parent only: PostgreSQL
//     checks privileges on the table a statement names, not on the
//     partitions its rows are routed to, so partitions made later by
//     Maintain are usable at once and need no grant; the role gets no
//     privilege on any partition, so it cannot read or write one directly);
//   - SELECT, INSERT, UPDATE on the positions table <table>_offsets (Record
//     upserts with SELECT ... FOR UPDATE; no DELETE);
//   - EXECUTE on the table's claim functions, if there are any;
//   - row-level security limiting the role to its own consumer group's rows:
//     on the positions table always, and on the dedup table under
//     ScopeConsumerGroup, where the key is (event_id, consumer_group). Under
//     ScopeGlobal the key is the event id alone and every group shares it
//     (an id any group inserts is a duplicate for all), so a row of the
//     dedup table belongs to no group and no policy is added there; groups
//     that share a Global table must trust each other.
//
// Ownership stays with the operator's role: the consumer's role cannot DROP,
// TRUNCATE, ALTER, COMMENT ON (the ownership marker), create or attach a
// partition, or change the policies. Owners and superusers bypass row-level
// security, so the single-role setup (one URL for both) keeps working.

// claimFunctionSuffixes name the table's claim functions (<table>_claim and
// <table>_claim_one, every overload): the role gets EXECUTE on those present.
var claimFunctionSuffixes = []string{claimSuffix, claimOneSuffix}

// ErrRoleNotFound is wrapped by GrantConsumer when the consumer's role does
// not exist: the operator does not create login roles.
var ErrRoleNotFound = errors.New("role not found")

// SchemaUsageError reports that the consumer's role has no USAGE on the
// table's schema and the engine's role could not grant it (it neither owns
// the schema nor holds USAGE WITH GRANT OPTION).
type SchemaUsageError struct {
	Schema string
	Role   string
}

// Error names the grant a schema owner has to run.
func (e *SchemaUsageError) Error() string {
	return fmt.Sprintf("role %q has no USAGE on schema %s and the operator's role may not grant it; have the schema's owner run: GRANT USAGE ON SCHEMA %s TO %s",
		e.Role, e.Schema, pgx.Identifier{e.Schema}.Sanitize(), pgx.Identifier{e.Role}.Sanitize())
}

// GrantResult reports what GrantConsumer did.
type GrantResult struct {
	// Unrestricted is non-empty when no policy holds the role back, and
	// says why: it owns the table (the single-role setup) or is a superuser
	// (nothing was granted: it needs nothing), or it bypasses row-level
	// security (the privileges were granted; the policies do not bind it).
	Unrestricted string
	// Statements are the statements that were run, in order; empty when
	// everything was in place already.
	Statements []string
}

// ValidateRole checks a role name for GrantConsumer and the outbox's
// grants: 1 to MaxIdentifierLen bytes without NUL, and none of the names
// that stand for more than one service's role: public (PostgreSQL reads a
// grant to "public", quoted or not, as a grant to every role), none
// (reserved) and the server's predefined pg_ roles (pg_monitor,
// pg_read_all_data, ...: held by roles the operator does not know); these
// in any case. It is quoted with pgx.Identifier wherever it is used.
func ValidateRole(role string) error {
	lower := strings.ToLower(role)
	switch {
	case role == "":
		return errors.New("invalid role: empty")
	case len(role) > MaxIdentifierLen:
		return fmt.Errorf("invalid role %q: %d bytes, at most %d", role, len(role), MaxIdentifierLen)
	case strings.ContainsRune(role, 0):
		return errors.New("invalid role: contains NUL")
	case lower == "public" || lower == "none":
		return fmt.Errorf("invalid role %q: a grant to it would reach every role of the server (public) or is reserved (none); name the service's own role", role)
	case strings.HasPrefix(lower, "pg_"):
		return fmt.Errorf("invalid role %q: pg_ names the server's predefined roles, which other roles hold; name the service's own role", role)
	}
	return nil
}

// GrantConsumer gives role what the consumer runtime of group needs on the
// table (see above), after EnsureTable or Adopt made the table and its
// positions table. Each privilege and policy is checked first and only the
// missing ones are granted or created, so calling it on every reconcile
// changes nothing once they are in place. It runs under the table's advisory
// lock.
//
// Creating a policy, and enabling row-level security the first time, takes
// ACCESS EXCLUSIVE on the table for an instant; it runs under the engine's
// lock_timeout and is retried like the other DDL (*LockError when the lock
// stays busy), so inserts queue behind it for at most the lock timeout. It
// happens once per role and group.
//
// Enabling row-level security on a table denies every role that is neither
// its owner nor given a policy; roles granted access by hand (a reporting
// role) need a policy of their own then.
func (e *Engine) GrantConsumer(ctx context.Context, role, group string) (GrantResult, error) {
	var res GrantResult
	if err := ValidateRole(role); err != nil {
		return res, fmt.Errorf("granting to the consumer's role on %s: %w", e.table, err)
	}
	if group == "" {
		return res, fmt.Errorf("granting to role %q on %s: empty consumer group", role, e.table)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return res, fmt.Errorf("granting to role %q on %s: %w", role, e.table, err)
	}
	defer release()
	if err := e.grantConsumer(ctx, conn, role, group, &res); err != nil {
		return res, fmt.Errorf("granting to role %q on %s: %w", role, e.table, err)
	}
	return res, nil
}

func (e *Engine) grantConsumer(ctx context.Context, conn *pgx.Conn, role, group string, res *GrantResult) error {
	if err := e.checkGrantable(ctx, conn); err != nil {
		return err
	}
	p, err := e.rolePrivileges(ctx, conn, role)
	if err != nil {
		return err
	}
	switch {
	case !p.exists:
		return fmt.Errorf("%w: %q (create it with CREATE ROLE ... LOGIN, then give the consumer its URL)", ErrRoleNotFound, role)
	case p.owner:
		res.Unrestricted = "it owns the table, or is a member of its owner"
		return nil
	case p.super:
		res.Unrestricted = "it is a superuser, or a member of one"
		return nil
	}
	// Grants are still due; only the policies do not hold it back.
	switch {
	case p.bypass:
		res.Unrestricted = "it bypasses row-level security (BYPASSRLS), or is a member of a role that does"
	case p.createRole:
		res.Unrestricted = "it has CREATEROLE, or is a member of a role that has it, and so may grant itself the table owner's role (PostgreSQL 15 and older)"
	}
	r := pgx.Identifier{role}.Sanitize()
	run := func(op, sql string) error {
		if err := e.ddl(ctx, conn, op, sql); err != nil {
			return err
		}
		res.Statements = append(res.Statements, sql)
		return nil
	}

	if !p.usage {
		if err := e.grantSchemaUsage(ctx, conn, role, run); err != nil {
			return err
		}
	}
	// The policies come before the table privileges, so that the role never
	// holds a privilege its policy does not limit yet.
	if err := e.createPolicies(ctx, conn, role, group, p, res); err != nil {
		return err
	}
	if !p.tblOK {
		if err := run("granting "+strings.Join(p.tblPrivs, ", ")+" on "+e.table.String(),
			"GRANT "+strings.Join(p.tblPrivs, ", ")+" ON TABLE "+e.parent()+" TO "+r); err != nil {
			return err
		}
	}
	if !p.posOK {
		if err := run("granting "+strings.Join(p.posPrivs, ", ")+" on "+e.positionsName(),
			"GRANT "+strings.Join(p.posPrivs, ", ")+" ON TABLE "+e.positionsIdent()+" TO "+r); err != nil {
			return err
		}
	}
	if err := e.grantClaimFunctions(ctx, conn, role, run); err != nil {
		return err
	}

	return nil
}

// checkGrantable checks that the table exists, is owned as EnsureTable
// leaves it, and has its positions table: only then is there anything to
// grant on.
func (e *Engine) checkGrantable(ctx context.Context, conn *pgx.Conn) error {
	if _, err := e.observeOwned(ctx, conn); err != nil {
		return err
	}
	if ok, err := e.checkPositions(ctx, conn); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: %s.%s (EnsureTable creates it)", ErrPositionsTableMissing, e.table.Schema, e.positionsName())
	}
	return nil
}

// rolePrivs is what the consumer's role has on the table, its positions
// table and its schema, and whether those tables have row-level security on.
type rolePrivs struct {
	exists                 bool
	owner, super, bypass   bool // the role is, or is a member at any depth of, ...
	createRole             bool // it may grant itself the owner's role
	usage, tblOK, posOK    bool
	tblPrivs, posPrivs     []string
	parentRLS, positionRLS bool
}

// rolePrivileges reads rolePrivs for role.
func (e *Engine) rolePrivileges(ctx context.Context, conn *pgx.Conn, role string) (rolePrivs, error) {
	var p rolePrivs
	qctx, cancel := e.bounded(ctx)
	defer cancel()
	// One read of everything the role has: has_*_privilege counts grants to
	// PUBLIC and through role membership, so nothing is granted twice.
	err := conn.QueryRow(qctx, `
WITH r AS (SELECT oid, rolsuper, rolbypassrls, rolcreaterole FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1::pg_catalog.text),
     t AS (SELECT c.oid, c.relowner, c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $2 AND c.relname = $3),
     p AS (SELECT c.oid, c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $2 AND c.relname = $4)
SELECT EXISTS (SELECT 1 FROM r),
       coalesce((SELECT pg_catalog.pg_has_role(r.oid, t.relowner, 'MEMBER') FROM r, t), false),
       -- A member of a role, at any depth, may SET ROLE to it: what that
       -- role may do, this one may too.
       coalesce((SELECT r.rolsuper OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles s
                  WHERE s.rolsuper AND pg_catalog.pg_has_role(r.oid, s.oid, 'MEMBER')) FROM r), false),
       coalesce((SELECT r.rolbypassrls OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles s
                  WHERE s.rolbypassrls AND pg_catalog.pg_has_role(r.oid, s.oid, 'MEMBER')) FROM r), false),
       -- Before PostgreSQL 16, CREATEROLE may GRANT any role that is not a
       -- superuser, the owner's included, to itself.
       pg_catalog.current_setting('server_version_num')::int OPERATOR(pg_catalog.<) 160000
         AND coalesce((SELECT r.rolcreaterole OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles s
                  WHERE s.rolcreaterole AND pg_catalog.pg_has_role(r.oid, s.oid, 'MEMBER')) FROM r), false),
       coalesce((SELECT pg_catalog.has_schema_privilege(r.oid, $2, 'USAGE') FROM r), false),
       coalesce((SELECT pg_catalog.has_table_privilege(r.oid, t.oid, 'SELECT') AND pg_catalog.has_table_privilege(r.oid, t.oid, 'INSERT') AND pg_catalog.has_table_privilege(r.oid, t.oid, 'DELETE') FROM r, t), false),
       coalesce((SELECT pg_catalog.has_table_privilege(r.oid, p.oid, 'SELECT') AND pg_catalog.has_table_privilege(r.oid, p.oid, 'INSERT') AND pg_catalog.has_table_privilege(r.oid, p.oid, 'UPDATE') FROM r, p), false),
       ARRAY(SELECT pr FROM r, t, pg_catalog.unnest(ARRAY['SELECT', 'INSERT', 'DELETE']) pr WHERE NOT pg_catalog.has_table_privilege(r.oid, t.oid, pr)),
       ARRAY(SELECT pr FROM r, p, pg_catalog.unnest(ARRAY['SELECT', 'INSERT', 'UPDATE']) pr WHERE NOT pg_catalog.has_table_privilege(r.oid, p.oid, pr)),
       coalesce((SELECT relrowsecurity FROM t), false), coalesce((SELECT relrowsecurity FROM p), false)`,
		role, e.table.Schema, e.table.Name, e.positionsName()).Scan(
		&p.exists, &p.owner, &p.super, &p.bypass, &p.createRole, &p.usage, &p.tblOK, &p.posOK, &p.tblPrivs, &p.posPrivs, &p.parentRLS, &p.positionRLS)
	cancel()
	if err != nil {
		return p, fmt.Errorf("reading the role's privileges: %w", err)
	}
	return p, nil
}

// grantSchemaUsage grants USAGE on the table's schema to role.
func (e *Engine) grantSchemaUsage(ctx context.Context, conn *pgx.Conn, role string, run func(op, sql string) error) error {
	r := pgx.Identifier{role}.Sanitize()
	schema := pgx.Identifier{e.table.Schema}.Sanitize()
	// A grantor without the right gets a WARNING, not an error: read
	// the privilege again to know.
	if err := run("granting USAGE on schema "+e.table.Schema, "GRANT USAGE ON SCHEMA "+schema+" TO "+r); err != nil {
		return err
	}
	var ok bool
	qctx, cancel := e.bounded(ctx)
	err := conn.QueryRow(qctx, `SELECT pg_catalog.has_schema_privilege($1, $2, 'USAGE')`, role, e.table.Schema).Scan(&ok)
	cancel()
	if err != nil {
		return fmt.Errorf("reading USAGE on schema %s: %w", e.table.Schema, err)
	}
	if !ok {
		return &SchemaUsageError{Schema: e.table.Schema, Role: role}
	}
	return nil
}

// createPolicies creates the row-level security policies that limit role to
// group's rows, where they are missing (policySQL).
func (e *Engine) createPolicies(ctx context.Context, conn *pgx.Conn, role, group string, p rolePrivs, res *GrantResult) error {
	lit, err := e.literal(ctx, conn, group)
	if err != nil {
		return err
	}
	var policies []string
	if e.table.Scope == ScopeConsumerGroup {
		if policies, err = e.policySQL(ctx, conn, e.table.Name, p.parentRLS, role, group, lit); err != nil {
			return err
		}
	}
	more, err := e.policySQL(ctx, conn, e.positionsName(), p.positionRLS, role, group, lit)
	if err != nil {
		return err
	}
	if policies = append(policies, more...); len(policies) > 0 {
		// One string, one implicit transaction: each table's ACCESS
		// EXCLUSIVE lock is taken once, and released at once.
		if err := e.ddl(ctx, conn, "creating the consumer group policies", strings.Join(policies, ";\n")); err != nil {
			return err
		}
		res.Statements = append(res.Statements, policies...)
	}
	return nil
}

// grantClaimFunctions grants EXECUTE on every overload of the table's claim
// functions the role may not execute yet.
func (e *Engine) grantClaimFunctions(ctx context.Context, conn *pgx.Conn, role string, run func(op, sql string) error) error {
	names := make([]string, 0, len(claimFunctionSuffixes))
	for _, s := range claimFunctionSuffixes {
		names = append(names, e.table.Name+s)
	}
	qctx, cancel := e.bounded(ctx)
	rows, err := conn.Query(qctx, `
SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(p.proname) || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = $1 AND p.proname = ANY($2::text[]) AND NOT pg_catalog.has_function_privilege($3, p.oid, 'EXECUTE')
 ORDER BY 1`, e.table.Schema, names, role)
	var fns []string
	if err == nil {
		fns, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	cancel()
	if err != nil {
		return fmt.Errorf("listing the claim functions: %w", err)
	}
	for _, fn := range fns {
		if err := run("granting EXECUTE on "+fn, "GRANT EXECUTE ON FUNCTION "+fn+" TO "+pgx.Identifier{role}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// literal quotes s as a SQL string literal on the server (quote_literal),
// which is right whatever standard_conforming_strings says and whatever s
// holds: a consumer group is any string Kafka accepts.
func (e *Engine) literal(ctx context.Context, conn *pgx.Conn, s string) (string, error) {
	qctx, cancel := e.bounded(ctx)
	defer cancel()
	var lit string
	if err := conn.QueryRow(qctx, `SELECT pg_catalog.quote_literal($1::text)`, s).Scan(&lit); err != nil {
		return "", fmt.Errorf("quoting the consumer group: %w", err)
	}
	return lit, nil
}

// RevokeConsumer takes back what GrantConsumer gave role for group: the
// group's policies on the table and its positions table; then, if no policy
// of this package for role is left on either (the role serves no other
// group here), every privilege granted to the role itself on both tables and
// on the claim functions. USAGE on the schema stays: it may have been there
// before, and it gives nothing by itself. A missing table or role is not an
// error, and neither is the table owner's role (or a member of it), which
// GrantConsumer never restricts and this never touches; a table that is not
// ours is (*OwnershipError).
//
// Run it when the consumer's role changes, so the old role keeps nothing.
// Dropping a policy takes ACCESS EXCLUSIVE on the table for an instant, under
// the engine's lock_timeout, like GrantConsumer.
func (e *Engine) RevokeConsumer(ctx context.Context, role, group string) (GrantResult, error) {
	var res GrantResult
	if err := ValidateRole(role); err != nil {
		return res, fmt.Errorf("revoking from the consumer's role on %s: %w", e.table, err)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return res, fmt.Errorf("revoking from role %q on %s: %w", role, e.table, err)
	}
	defer release()
	if err := e.revokeConsumer(ctx, conn, role, group, &res); err != nil {
		return res, fmt.Errorf("revoking from role %q on %s: %w", role, e.table, err)
	}
	return res, nil
}

func (e *Engine) revokeConsumer(ctx context.Context, conn *pgx.Conn, role, group string, res *GrantResult) error {
	if _, err := e.observeOwned(ctx, conn); errors.Is(err, ErrTableNotFound) {
		return nil // nothing left to revoke on
	} else if err != nil {
		return err
	}
	var (
		exists  bool
		drop    []string // tables with this group's policy
		others  int      // our policies of the role for other groups
		granted []string // tables and functions with grants to the role itself
	)
	qctx, cancel := e.bounded(ctx)
	defer cancel()
	names := make([]string, 0, len(claimFunctionSuffixes))
	for _, s := range claimFunctionSuffixes {
		names = append(names, e.table.Name+s)
	}
	err := conn.QueryRow(qctx, `
WITH t AS (SELECT c.oid, c.relname::text AS name, c.relacl, c.relowner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = $2 AND c.relname = ANY (ARRAY[$3, $4])),
     -- Never the owner (or a member of it): its own privileges are in
     -- relacl too once anything was granted, and are not ours to take.
     r AS (SELECT oid FROM pg_roles WHERE rolname = $1
              AND NOT EXISTS (SELECT 1 FROM t WHERE pg_catalog.pg_has_role(pg_roles.oid, t.relowner, 'MEMBER')))
SELECT EXISTS (SELECT 1 FROM r),
       ARRAY(SELECT t.name FROM t JOIN pg_policy p ON p.polrelid = t.oid WHERE p.polname = $5 ORDER BY t.name),
       (SELECT pg_catalog.count(*) FROM t JOIN pg_policy p ON p.polrelid = t.oid, r
         WHERE pg_catalog.left(p.polname, pg_catalog.length($6)) = $6 AND p.polname <> $5 AND r.oid = ANY (p.polroles))::int,
       ARRAY(SELECT 'TABLE ' || pg_catalog.quote_ident($2) || '.' || pg_catalog.quote_ident(t.name) FROM t, r
              WHERE EXISTS (SELECT 1 FROM pg_catalog.aclexplode(t.relacl) a WHERE a.grantee = r.oid)
             UNION ALL
             SELECT 'FUNCTION ' || pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(p.proname) || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace, r
              WHERE n.nspname = $2 AND p.proname = ANY ($7::text[])
                AND EXISTS (SELECT 1 FROM pg_catalog.aclexplode(p.proacl) a WHERE a.grantee = r.oid))`,
		role, e.table.Schema, e.table.Name, e.positionsName(), policyName(role, group), policyPrefix, names).Scan(
		&exists, &drop, &others, &granted)
	cancel()
	if err != nil {
		return fmt.Errorf("reading the role's grants and policies: %w", err)
	}
	if !exists {
		return nil
	}
	r := pgx.Identifier{role}.Sanitize()
	run := func(op, sql string) error {
		if err := e.ddl(ctx, conn, op, sql); err != nil {
			return err
		}
		res.Statements = append(res.Statements, sql)
		return nil
	}
	// Privileges first, so that the role never holds one its policy no
	// longer limits.
	if others == 0 {
		for _, obj := range granted {
			if err := run("revoking from "+role+" on "+obj, "REVOKE ALL ON "+obj+" FROM "+r); err != nil {
				return err
			}
		}
	}
	for _, tbl := range drop {
		sql := "DROP POLICY " + pgx.Identifier{policyName(role, group)}.Sanitize() + " ON " + pgx.Identifier{e.table.Schema, tbl}.Sanitize()
		if err := run("dropping the consumer group policy on "+tbl, sql); err != nil {
			return err
		}
	}
	return nil
}
