package dedup

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// policyPrefix starts the name of every policy GrantConsumer creates.
const policyPrefix = "idempotency_consumer_"

// policyName names the policy of one role and group: a hash, because a role
// name alone may take the whole identifier length. The policy's own
// definition says whom it is for (pg_policies).
func policyName(role, group string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(role + "\x00" + group)) // a hash.Hash never returns an error
	return fmt.Sprintf("%s%016x", policyPrefix, h.Sum64())
}

// policySQL returns the statements that enable row-level security on table
// (if it is not) and create the role's policy for group (if it is missing):
// the role sees and writes only rows whose consumer_group is group. Policies
// of one role for several groups add up (permissive policies are ORed).
func (e *Engine) policySQL(ctx context.Context, conn *pgx.Conn, table string, rls bool, role, group, lit string) ([]string, error) {
	ident := pgx.Identifier{e.table.Schema, table}.Sanitize()
	name := policyName(role, group)
	var has bool
	qctx, cancel := e.bounded(ctx)
	err := conn.QueryRow(qctx, `
SELECT EXISTS (SELECT 1 FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = $1 AND c.relname = $2 AND p.polname = $3)`, e.table.Schema, table, name).Scan(&has)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("looking up the policy of %s: %w", table, err)
	}
	var out []string
	if !has {
		out = append(out, fmt.Sprintf("CREATE POLICY %s ON %s AS PERMISSIVE FOR ALL TO %s USING (consumer_group = %s) WITH CHECK (consumer_group = %s)",
			pgx.Identifier{name}.Sanitize(), ident, pgx.Identifier{role}.Sanitize(), lit, lit))
	}
	if !rls {
		out = append(out, "ALTER TABLE "+ident+" ENABLE ROW LEVEL SECURITY")
	}
	return out, nil
}

// AccessError reports that the role a consumer connects as may not do what
// the runtime does on the table: privileges it lacks, or row-level security
// that admits none of its group's rows. It is not permanent: the table's
// owner grants what is missing (Engine.GrantConsumer).
type AccessError struct {
	Role  string // current_user
	Group string
	// Problems lists what is missing, one entry per table.
	Problems []string
}

// Error names the role, what it lacks and who grants it.
func (e *AccessError) Error() string {
	return fmt.Sprintf("role %q may not run the consumer of group %q: %s; the table's owner grants it (dedup.Engine.GrantConsumer; the operator does so for the role of spec.database.consumerURLSecretRef)",
		e.Role, e.Group, strings.Join(e.Problems, "; "))
}

// CheckAccess verifies that the role q is connected as (current_user) holds
// what the runtime of group needs on t (after defaults) and its positions
// table: the privileges GrantConsumer grants and, where row-level security
// applies to the role, a policy that can admit the group's rows (this
// package's policy for the role and group, or any policy of someone else's,
// which it cannot judge). It returns an *AccessError listing what is
// missing; the owner, a superuser and a BYPASSRLS role pass the policy part.
// DELETE on the dedup table is needed only with forget (a runtime that takes
// ids back with Inserter.Forget; the external-call path never does). It
// reads the catalog only.
func CheckAccess(ctx context.Context, q Queryer, t Table, group string, forget bool) error {
	t = t.WithDefaults()
	tablePrivs := []string{"SELECT", "INSERT"}
	if forget {
		tablePrivs = append(tablePrivs, "DELETE")
	}
	var (
		role     string
		usage    bool
		problems []string
	)
	if err := q.QueryRow(ctx, `SELECT current_user::text, pg_catalog.has_schema_privilege($1, 'USAGE')`, t.Schema).Scan(&role, &usage); err != nil {
		return fmt.Errorf("checking the consumer role's privileges on %s: %w", t, err)
	}
	if !usage {
		return &AccessError{Role: role, Group: group, Problems: []string{"no USAGE on schema " + t.Schema}}
	}
	positions := PositionsTableName(t)
	for _, rel := range []struct {
		name  string
		privs []string
	}{{t.Name, tablePrivs}, {positions, []string{"SELECT", "INSERT", "UPDATE"}}} {
		var (
			missing, policies []string
			rls               bool
		)
		err := q.QueryRow(ctx, `
SELECT ARRAY(SELECT p FROM pg_catalog.unnest($3::text[]) p WHERE NOT pg_catalog.has_table_privilege(c.oid, p)),
       c.relrowsecurity AND NOT r.rolsuper AND NOT r.rolbypassrls
         AND (c.relforcerowsecurity OR NOT pg_catalog.pg_has_role(r.oid, c.relowner, 'MEMBER')),
       ARRAY(SELECT pol.polname::text FROM pg_policy pol
              WHERE pol.polrelid = c.oid AND pol.polcmd IN ('*', 'a') AND pol.polpermissive
                AND (0 = ANY (pol.polroles) OR EXISTS (SELECT 1 FROM pg_catalog.unnest(pol.polroles) pr WHERE pg_catalog.pg_has_role(r.oid, pr, 'MEMBER'))))
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, pg_roles r
 WHERE n.nspname = $1 AND c.relname = $2 AND r.rolname = current_user`, t.Schema, rel.name, rel.privs).Scan(&missing, &rls, &policies)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // a missing table is the other checks' business
		}
		if err != nil {
			return fmt.Errorf("checking the consumer role's privileges on %s.%s: %w", t.Schema, rel.name, err)
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("no %s on %s.%s", strings.Join(missing, ", "), t.Schema, rel.name))
		}
		if rls && !admits(policies, role, group) {
			problems = append(problems, fmt.Sprintf("row-level security on %s.%s and no policy for this role and group", t.Schema, rel.name))
		}
	}
	if len(problems) > 0 {
		return &AccessError{Role: role, Group: group, Problems: problems}
	}
	return nil
}

// admits reports whether the policies that apply to role may admit group's
// rows: this package's policy for role and group, or a policy it did not
// write (whose condition it cannot judge).
func admits(policies []string, role, group string) bool {
	for _, p := range policies {
		if p == policyName(role, group) || !strings.HasPrefix(p, policyPrefix) {
			return true
		}
	}
	return false
}
