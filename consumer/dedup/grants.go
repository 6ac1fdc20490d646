package dedup

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
var claimFunctionSuffixes = []string{"_claim", "_claim_one"}

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
	// Unrestricted is non-empty when the role needs no grant and no policy
	// holds it back: it owns the table (the single-role setup), is a
	// superuser, or bypasses row-level security. It says which.
	Unrestricted string
	// Statements are the statements that were run, in order; empty when
	// everything was in place already.
	Statements []string
}

// ValidateRole checks a role name for GrantConsumer: 1 to MaxIdentifierLen
// bytes without NUL. It is quoted with pgx.Identifier wherever it is used.
func ValidateRole(role string) error {
	switch {
	case role == "":
		return errors.New("invalid role: empty")
	case len(role) > MaxIdentifierLen:
		return fmt.Errorf("invalid role %q: %d bytes, at most %d", role, len(role), MaxIdentifierLen)
	case strings.ContainsRune(role, 0):
		return errors.New("invalid role: contains NUL")
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
	st, err := e.observe(ctx, conn)
	if err != nil {
		return err
	}
	if !st.Exists {
		return ErrTableNotFound
	}
	if st.Owner == "" {
		return &OwnershipError{Table: e.table.String()}
	}
	if want := e.ensuredOwner(); want != "" && st.Owner != want {
		return &OwnershipError{Table: e.table.String(), Owner: st.Owner}
	}
	if ok, err := e.checkPositions(ctx, conn); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: %s.%s (EnsureTable creates it)", ErrPositionsTableMissing, e.table.Schema, e.positionsName())
	}

	var (
		exists                 bool
		owner, super, bypass   bool
		usage, tblOK, posOK    bool
		tblPrivs, posPrivs     []string
		parentRLS, positionRLS bool
	)
	qctx, cancel := e.bounded(ctx)
	defer cancel()
	// One read of everything the role has: has_*_privilege counts grants to
	// PUBLIC and through role membership, so nothing is granted twice.
	err = conn.QueryRow(qctx, `
WITH r AS (SELECT oid, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1),
     t AS (SELECT c.oid, c.relowner, c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $2 AND c.relname = $3),
     p AS (SELECT c.oid, c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $2 AND c.relname = $4)
SELECT EXISTS (SELECT 1 FROM r),
       coalesce((SELECT pg_has_role(r.oid, t.relowner, 'MEMBER') FROM r, t), false),
       coalesce((SELECT rolsuper FROM r), false), coalesce((SELECT rolbypassrls FROM r), false),
       coalesce((SELECT has_schema_privilege(r.oid, $2, 'USAGE') FROM r), false),
       coalesce((SELECT has_table_privilege(r.oid, t.oid, 'SELECT') AND has_table_privilege(r.oid, t.oid, 'INSERT') AND has_table_privilege(r.oid, t.oid, 'DELETE') FROM r, t), false),
       coalesce((SELECT has_table_privilege(r.oid, p.oid, 'SELECT') AND has_table_privilege(r.oid, p.oid, 'INSERT') AND has_table_privilege(r.oid, p.oid, 'UPDATE') FROM r, p), false),
       ARRAY(SELECT pr FROM r, t, unnest(ARRAY['SELECT', 'INSERT', 'DELETE']) pr WHERE NOT has_table_privilege(r.oid, t.oid, pr)),
       ARRAY(SELECT pr FROM r, p, unnest(ARRAY['SELECT', 'INSERT', 'UPDATE']) pr WHERE NOT has_table_privilege(r.oid, p.oid, pr)),
       coalesce((SELECT relrowsecurity FROM t), false), coalesce((SELECT relrowsecurity FROM p), false)`,
		role, e.table.Schema, e.table.Name, e.positionsName()).Scan(
		&exists, &owner, &super, &bypass, &usage, &tblOK, &posOK, &tblPrivs, &posPrivs, &parentRLS, &positionRLS)
	cancel()
	if err != nil {
		return fmt.Errorf("reading the role's privileges: %w", err)
	}
	switch {
	case !exists:
		return fmt.Errorf("%w: %q (create it with CREATE ROLE ... LOGIN, then give the consumer its URL)", ErrRoleNotFound, role)
	case owner:
		res.Unrestricted = "it owns the table"
		return nil
	case super:
		res.Unrestricted = "it is a superuser"
		return nil
	}
	if bypass {
		// Grants are still due; only the policies do not hold it back.
		res.Unrestricted = "it bypasses row-level security (BYPASSRLS)"
	}
	r := pgx.Identifier{role}.Sanitize()
	run := func(op, sql string) error {
		if err := e.ddl(ctx, conn, op, sql); err != nil {
			return err
		}
		res.Statements = append(res.Statements, sql)
		return nil
	}

	if !usage {
		schema := pgx.Identifier{e.table.Schema}.Sanitize()
		// A grantor without the right gets a WARNING, not an error: read
		// the privilege again to know.
		if err := run("granting USAGE on schema "+e.table.Schema, "GRANT USAGE ON SCHEMA "+schema+" TO "+r); err != nil {
			return err
		}
		var ok bool
		qctx, cancel := e.bounded(ctx)
		err := conn.QueryRow(qctx, `SELECT has_schema_privilege($1, $2, 'USAGE')`, role, e.table.Schema).Scan(&ok)
		cancel()
		if err != nil {
			return fmt.Errorf("reading USAGE on schema %s: %w", e.table.Schema, err)
		}
		if !ok {
			return &SchemaUsageError{Schema: e.table.Schema, Role: role}
		}
	}
	// The policies come before the table privileges, so that the role never
	// holds a privilege its policy does not limit yet.
	lit, err := e.literal(ctx, conn, group)
	if err != nil {
		return err
	}
	if e.table.Scope == ScopeConsumerGroup {
		if err := e.ensurePolicy(ctx, conn, e.table.Name, parentRLS, role, group, lit, run); err != nil {
			return err
		}
	}
	if err := e.ensurePolicy(ctx, conn, e.positionsName(), positionRLS, role, group, lit, run); err != nil {
		return err
	}
	if !tblOK {
		if err := run("granting "+strings.Join(tblPrivs, ", ")+" on "+e.table.String(),
			"GRANT "+strings.Join(tblPrivs, ", ")+" ON TABLE "+e.parent()+" TO "+r); err != nil {
			return err
		}
	}
	if !posOK {
		if err := run("granting "+strings.Join(posPrivs, ", ")+" on "+e.positionsName(),
			"GRANT "+strings.Join(posPrivs, ", ")+" ON TABLE "+e.positionsIdent()+" TO "+r); err != nil {
			return err
		}
	}
	if err := e.grantClaimFunctions(ctx, conn, role, run); err != nil {
		return err
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
SELECT quote_ident(n.nspname) || '.' || quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')'
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = $1 AND p.proname = ANY($2::text[]) AND NOT has_function_privilege($3, p.oid, 'EXECUTE')
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
	if err := conn.QueryRow(qctx, `SELECT quote_literal($1::text)`, s).Scan(&lit); err != nil {
		return "", fmt.Errorf("quoting the consumer group: %w", err)
	}
	return lit, nil
}

// policyName names the policy of one role and group: a hash, because a role
// name alone may take the whole identifier length. The policy's own
// definition says whom it is for (pg_policies).
func policyName(role, group string) string {
	h := fnv.New64a()
	h.Write([]byte(role + "\x00" + group))
	return fmt.Sprintf("idempotency_consumer_%016x", h.Sum64())
}

// ensurePolicy enables row-level security on table (if it is not) and
// creates the role's policy for group (if it is missing): the role sees and
// writes only rows whose consumer_group is group. Policies of one role for
// several groups add up (permissive policies are ORed).
func (e *Engine) ensurePolicy(ctx context.Context, conn *pgx.Conn, table string, rls bool, role, group, lit string, run func(op, sql string) error) error {
	ident := pgx.Identifier{e.table.Schema, table}.Sanitize()
	name := policyName(role, group)
	var has bool
	qctx, cancel := e.bounded(ctx)
	err := conn.QueryRow(qctx, `
SELECT EXISTS (SELECT 1 FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = $1 AND c.relname = $2 AND p.polname = $3)`, e.table.Schema, table, name).Scan(&has)
	cancel()
	if err != nil {
		return fmt.Errorf("looking up the policy of %s: %w", table, err)
	}
	if !has {
		sql := fmt.Sprintf("CREATE POLICY %s ON %s AS PERMISSIVE FOR ALL TO %s USING (consumer_group = %s) WITH CHECK (consumer_group = %s)",
			pgx.Identifier{name}.Sanitize(), ident, pgx.Identifier{role}.Sanitize(), lit, lit)
		if err := run("creating the consumer group policy on "+table, sql); err != nil {
			return err
		}
	}
	if !rls {
		// After the policy, so that the role is never locked out of its
		// rows in between.
		if err := run("enabling row-level security on "+table, "ALTER TABLE "+ident+" ENABLE ROW LEVEL SECURITY"); err != nil {
			return err
		}
	}
	return nil
}
