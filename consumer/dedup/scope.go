package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ScopeError reports a dedup table whose scope is not the one a consumer is
// configured with. A consumer configured Global on a table keyed by
// (event_id, consumer_group) makes Forget delete other groups' rows of an id;
// one configured ConsumerGroup on a table keyed by event_id alone skips, as a
// duplicate, an id another group processed. The runtime refuses to start
// with either.
type ScopeError struct {
	Table      string   // schema-qualified
	Configured Scope    // what the consumer was configured with
	Marker     Scope    // the table marker's scope; "" when unmarked or unset
	PrimaryKey []string // the table's primary key columns
}

// Error names both scopes and what the table says about itself.
func (e *ScopeError) Error() string {
	marker := "no marker scope"
	if e.Marker != "" {
		marker = fmt.Sprintf("marker scope %q", e.Marker)
	}
	return fmt.Sprintf("dedup table %s is keyed for scope %s (%s, primary key (%s)), but the consumer is configured with scope %s; configure scope %s, or use a table of its own",
		e.Table, e.tableScope(), marker, strings.Join(e.PrimaryKey, ", "), e.Configured, e.tableScope())
}

// tableScope is the scope the primary key implements ("unknown" for neither
// key).
func (e *ScopeError) tableScope() string {
	if s := scopeOfKey(e.PrimaryKey); s != "" {
		return string(s)
	}
	return "unknown"
}

func scopeOfKey(pkey []string) Scope {
	switch {
	case slices.Equal(pkey, []string{"event_id"}):
		return ScopeGlobal
	case slices.Equal(pkey, []string{"event_id", "consumer_group"}):
		return ScopeConsumerGroup
	}
	return ""
}

// CheckScope compares t's scope (after defaults) with what the existing table
// is: its primary key, and its marker's scope when it has one. It returns a
// *ScopeError when either disagrees, and an error wrapping ErrTableNotFound
// when the table does not exist. It reads pg_catalog only, so the consumer's
// role can run it.
func CheckScope(ctx context.Context, q Queryer, t Table) error {
	t = t.WithDefaults()
	var (
		comment *string
		pkey    []string
	)
	err := q.QueryRow(ctx, `
SELECT pg_catalog.obj_description(c.oid, 'pg_class'),
       ARRAY(SELECT a.attname::text
               FROM pg_constraint con
               CROSS JOIN LATERAL pg_catalog.unnest(con.conkey) WITH ORDINALITY k(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
              WHERE con.conrelid = c.oid AND con.contype = 'p' ORDER BY k.ord)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&comment, &pkey)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("checking the scope of %s: %w", t, ErrTableNotFound)
	}
	if err != nil {
		return fmt.Errorf("checking the scope of %s: %w", t, err)
	}
	var marker Scope
	if comment != nil {
		if m, ok := parseMarker(*comment); ok {
			marker = m.Scope
		}
	}
	if scopeOfKey(pkey) != t.Scope || (marker != "" && marker != t.Scope) {
		return &ScopeError{Table: t.String(), Configured: t.Scope, Marker: marker, PrimaryKey: pkey}
	}
	return nil
}
