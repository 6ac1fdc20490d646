package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// relation is a table as found in pg_catalog.
type relation struct {
	exists bool
	oid    uint32
	kind   string // r, p, v, ...
	marker dedup.Marker
}

func lookup(ctx context.Context, q querier, schema, name string) (relation, error) {
	var (
		r       relation
		comment *string
	)
	err := q.QueryRow(ctx, `
SELECT c.oid, c.relkind::text, pg_catalog.obj_description(c.oid, 'pg_class')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2`, schema, name).Scan(&r.oid, &r.kind, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("looking up %s.%s: %w", schema, name, err)
	}
	r.exists = true
	if comment != nil {
		_ = json.Unmarshal([]byte(*comment), &r.marker) // not JSON: not a marker
	}
	return r, nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// source is the legacy table as the copy reads it.
type source struct {
	schema, name string
	rel          relation
	id           string // quoted column names; group and at may be ""
	group, at    string
}

func (s source) ident() string { return pgx.Identifier{s.schema, s.name}.Sanitize() }

func (s source) String() string { return s.schema + "." + s.name }

// locate finds the legacy table, renamed or not, and says whether it still
// has to be renamed.
func locate(ctx context.Context, q querier, c Config) (src source, rename bool, err error) {
	legacy, err := lookup(ctx, q, c.LegacySchema, c.Legacy)
	if err != nil {
		return src, false, err
	}
	isLegacy := func(r relation) bool { return r.exists && (r.kind == "r" || r.kind == "p") && r.marker.Owner == "" }
	if !c.sameName() {
		if !isLegacy(legacy) {
			return src, false, fmt.Errorf("legacy table %s.%s: %s", c.LegacySchema, c.Legacy, describe(legacy))
		}
		return source{schema: c.LegacySchema, name: c.Legacy, rel: legacy}, false, nil
	}
	renamed, err := lookup(ctx, q, c.LegacySchema, c.RenameTo)
	if err != nil {
		return src, false, err
	}
	switch {
	case isLegacy(legacy) && !renamed.exists:
		return source{schema: c.LegacySchema, name: c.Legacy, rel: legacy}, true, nil
	case isLegacy(renamed) && (!legacy.exists || legacy.marker.Owner != ""):
		// Renamed by an earlier run; the new table may exist already.
		return source{schema: c.LegacySchema, name: c.RenameTo, rel: renamed}, false, nil
	case isLegacy(legacy) && renamed.exists:
		return src, false, fmt.Errorf("cannot rename %s.%s to %s: a relation of that name exists; choose another with RenameTo",
			c.LegacySchema, c.Legacy, c.RenameTo)
	default:
		return src, false, fmt.Errorf("no legacy table: %s.%s is %s and %s.%s is %s",
			c.LegacySchema, c.Legacy, describe(legacy), c.LegacySchema, c.RenameTo, describe(renamed))
	}
}

func describe(r relation) string {
	switch {
	case !r.exists:
		return "missing"
	case r.marker.Owner != "":
		return "already a dedup table (it carries an ownership marker)"
	case r.kind != "r" && r.kind != "p":
		return fmt.Sprintf("not a table (relkind %s)", r.kind)
	}
	return "a legacy table"
}

// columns resolves and checks the legacy table's columns.
func columns(ctx context.Context, q querier, c Config, src *source) (hasIndex bool, err error) {
	rows, err := q.Query(ctx, `
SELECT a.attname::text, a.atttypid::regtype::text,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indkey[0] = a.attnum)
  FROM pg_attribute a
 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, src.rel.oid)
	if err != nil {
		return false, fmt.Errorf("reading the columns of %s: %w", src, err)
	}
	type col struct {
		typ     string
		indexed bool
	}
	cols := map[string]col{}
	for rows.Next() {
		var (
			name string
			cl   col
		)
		if err := rows.Scan(&name, &cl.typ, &cl.indexed); err != nil {
			rows.Close()
			return false, fmt.Errorf("reading the columns of %s: %w", src, err)
		}
		cols[name] = cl
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("reading the columns of %s: %w", src, err)
	}
	id, ok := cols[c.IDColumn]
	switch {
	case !ok:
		return false, fmt.Errorf("legacy table %s has no column %q (set the id column)", src, c.IDColumn)
	case id.typ != "uuid":
		return false, fmt.Errorf("legacy column %s.%s is %s, not uuid: convert it first (ALTER TABLE ... ALTER COLUMN %s TYPE uuid USING %s::uuid)",
			src, c.IDColumn, id.typ, c.IDColumn, c.IDColumn)
	}
	src.id = pgx.Identifier{c.IDColumn}.Sanitize()

	pick := func(explicit, dflt, what string, types ...string) (string, error) {
		name := explicit
		if name == "-" {
			return "", nil
		}
		if name == "" {
			if _, ok := cols[dflt]; !ok {
				return "", nil
			}
			name = dflt
		}
		cl, ok := cols[name]
		if !ok {
			return "", fmt.Errorf("legacy table %s has no %s column %q", src, what, name)
		}
		if !slices.Contains(types, cl.typ) {
			return "", fmt.Errorf("legacy %s column %s.%s is %s, not one of %s", what, src, name, cl.typ, strings.Join(types, ", "))
		}
		return pgx.Identifier{name}.Sanitize(), nil
	}
	if src.group, err = pick(c.GroupColumn, DefaultGroupColumn, "group", "text", "character varying", "character", "name"); err != nil {
		return false, err
	}
	if src.at, err = pick(c.ProcessedAtColumn, DefaultProcessedAtColumn, "processed-at",
		"timestamp with time zone", "timestamp without time zone", "date"); err != nil {
		return false, err
	}
	if src.group == "" && c.Group == "" {
		return false, fmt.Errorf("legacy table %s has no consumer group column: say which group its rows belong to (Group)", src)
	}
	return id.indexed, nil
}

// v7 is the SQL test for a UUID v7 with the RFC 9562 variant (the only ids
// the consumer runtime accepts), on the text form, which is lower-case.
func v7(col string) string {
	return fmt.Sprintf(`(%[1]s IS NOT NULL AND substr(%[1]s::text, 15, 1) = '7' AND substr(%[1]s::text, 20, 1) IN ('8', '9', 'a', 'b'))`, col)
}

// groupExpr and atExpr are the values written for a legacy row r; $n is the
// parameter holding Config.Group.
func (s source) groupExpr(r, param string) string {
	if s.group == "" {
		return param
	}
	return fmt.Sprintf("COALESCE(%s.%s::text, %s)", r, s.group, param)
}

func (s source) atExpr(r string) string {
	if s.at == "" {
		return "now()"
	}
	return fmt.Sprintf("COALESCE(%s.%s::timestamptz, now())", r, s.at)
}
