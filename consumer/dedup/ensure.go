package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnsureTable creates the schema (if missing), the partitioned table and its
// ownership marker for owner, or checks an existing table: it must carry
// owner's marker (else *OwnershipError) and the requested layout (else
// *LayoutError). A table of an older layout version is migrated first; one
// of a newer version is refused with *LayoutVersionError, unchanged. A
// table it creates is usable at once: it gets its first partitions, as
// Maintain at the current time with the default policy (DefaultPremake
// intervals ahead, DefaultRetention behind) would make them, in the same
// session. Maintain must still run on a schedule (cmd/dedupctl's maintain
// -every, the operator), or the window closes DefaultPremake intervals
// out. WithoutFirstPartitions leaves them to the caller's own Maintain
// (the operator plans ahead of now by its lead, with the object's policy).
//
// After it succeeds, this Engine's Maintain refuses (*OwnershipError) a
// table whose marker has come to name another owner meanwhile (adopted by
// another object between the two calls).
func (e *Engine) EnsureTable(ctx context.Context, owner string) error {
	if err := ValidateOwner(owner); err != nil {
		return fmt.Errorf("ensuring table %s: %w", e.table, err)
	}
	// One session (and one take of the lock) for the three steps: each
	// commits on its own, as it would on sessions of their own.
	conn, release, err := e.session(ctx)
	if err != nil {
		return fmt.Errorf("ensuring table %s: %w", e.table, err)
	}
	defer release()
	created, err := e.ensureTable(ctx, conn, owner)
	if err == nil {
		err = e.ensurePositionsOn(ctx, conn) // positions.go; added to tables of older versions too
	}
	if err == nil {
		err = e.ensureClaimOn(ctx, conn) // claim.go; installed or upgraded on every ensure
	}
	if err == nil {
		e.setOwner(owner)
	}
	if err == nil && created && !e.cfg.noFirst {
		var res Result
		policy := Policy{Interval: e.table.Interval}.WithDefaults()
		if merr := e.maintain(ctx, conn, time.Now(), policy, &res); merr != nil {
			err = fmt.Errorf("ensuring table %s: its first partitions: %w", e.table, merr)
		}
	}
	return err
}

func (e *Engine) ensureTable(ctx context.Context, conn *pgx.Conn, owner string) (created bool, err error) {
	st, err := e.observe(ctx, conn)
	if err != nil {
		return false, fmt.Errorf("ensuring table %s: %w", e.table, err)
	}
	if st.Exists {
		if st.Owner != owner {
			return false, &OwnershipError{Table: e.table.String(), Owner: st.Owner}
		}
		// An older layout is brought up to date before it is compared with
		// this build's; a newer one is refused (layout.go).
		if _, err := e.migrateLayout(ctx, conn, st); err != nil {
			return false, err
		}
		return false, e.checkLayout(ctx, conn, st)
	}
	if err := e.createTable(ctx, conn, owner); err != nil {
		return false, e.creationErr("ensuring", err)
	}
	return true, nil
}

// creationErr is createTable's error as "<verb> table t: err"; a
// *NameConflictError, which names the table itself, as it is.
func (e *Engine) creationErr(verb string, err error) error {
	var nc *NameConflictError
	if errors.As(err, &nc) {
		return err
	}
	return fmt.Errorf("%s table %s: %w", verb, e.table, err)
}

// nameConflicts checks the names that creating the table takes besides its
// own (whose absence observe established): the primary key index
// <table>_pkey, which a renamed legacy table keeps, and the table's row
// type, which a type of the same name would block.
func (e *Engine) nameConflicts(ctx context.Context, conn *pgx.Conn) error {
	for _, n := range []struct{ name, need string }{
		{e.table.Name + "_pkey", "the table's primary key"},
		{e.table.Name, "the table's row type"},
	} {
		kind, of, err := e.nameTaken(ctx, conn, n.name)
		if err != nil {
			return err
		}
		if kind != "" {
			return &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + n.name, Kind: kind, Of: of, Need: n.need}
		}
	}
	return nil
}

func (e *Engine) createTable(ctx context.Context, conn *pgx.Conn, owner string) error {
	var schemaExists bool
	qctx, cancel := e.bounded(ctx)
	err := conn.QueryRow(qctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, e.table.Schema).Scan(&schemaExists)
	cancel()
	if err != nil {
		return fmt.Errorf("looking up schema: %w", err)
	}
	if schemaExists {
		if err := e.nameConflicts(ctx, conn); err != nil {
			return err
		}
	}
	if !schemaExists {
		// Checked first because CREATE SCHEMA IF NOT EXISTS still needs the
		// CREATE privilege on the database, which a role may lack where the
		// schema was made for it.
		if err := e.ddl(ctx, conn, "creating schema", "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{e.table.Schema}.Sanitize()); err != nil {
			return err
		}
	}
	marker, err := jsonLiteral(Marker{Owner: owner, Scope: e.table.Scope, Interval: e.table.Interval, Version: e.layoutVersion()})
	if err != nil {
		return err
	}
	key := "event_id"
	if e.table.Scope == ScopeConsumerGroup {
		key = "event_id, consumer_group"
	}
	parent := e.parent()
	// One simple-protocol string runs as one implicit transaction: the table
	// never exists without its marker. The BRIN index keeps ad-hoc
	// "processed since" queries cheap at almost no insert cost, because rows
	// arrive in processed_at order. consumer_group is stored PLAIN (never
	// compressed or moved out of line), so the partitions, made LIKE the
	// table, get no TOAST table and index: two relations and files fewer
	// each. The CRD limits a group to 255 characters; a group of more than
	// some 8 kB from another writer fails with "row is too big" (under scope
	// ConsumerGroup the primary key's B-tree refuses more than some 2.7 kB
	// in any case).
	sql := fmt.Sprintf(`CREATE TABLE %s (
	event_id uuid NOT NULL,
	consumer_group text NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT %s PRIMARY KEY (%s)
) PARTITION BY RANGE (event_id);
ALTER TABLE %s ALTER COLUMN consumer_group SET STORAGE PLAIN;
CREATE INDEX ON %s USING brin (processed_at);
COMMENT ON TABLE %s IS %s`,
		parent, pgx.Identifier{e.table.Name + "_pkey"}.Sanitize(), key, parent, parent, parent, marker)
	err = e.ddl(ctx, conn, "creating table", sql)
	if isNameTaken(err) {
		// Taken since the check above: name what took it.
		if nerr := e.nameConflicts(ctx, conn); nerr != nil {
			return nerr
		}
	}
	return err
}

// checkLayout compares an existing table with the requested layout.
func (e *Engine) checkLayout(ctx context.Context, conn *pgx.Conn, st State) error {
	var problems []string
	if st.Marker.Scope != e.table.Scope {
		problems = append(problems, fmt.Sprintf("marker scope is %q, requested %q", st.Marker.Scope, e.table.Scope))
	}
	if st.Marker.Interval != e.table.Interval {
		problems = append(problems, fmt.Sprintf("marker interval is %q, requested %q (the interval cannot change on an existing table)", st.Marker.Interval, e.table.Interval))
	}
	var (
		relkind string
		partkey *string
		pkey    []string
		cols    []string
	)
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	err := conn.QueryRow(ctx, `
SELECT c.relkind::text,
       CASE WHEN c.relkind = 'p' THEN pg_catalog.pg_get_partkeydef(c.oid) END,
       ARRAY(SELECT a.attname::text
               FROM pg_constraint con
               CROSS JOIN LATERAL pg_catalog.unnest(con.conkey) WITH ORDINALITY k(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
              WHERE con.conrelid = c.oid AND con.contype = 'p' ORDER BY k.ord),
       ARRAY(SELECT a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
               FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2`, e.table.Schema, e.table.Name).Scan(&relkind, &partkey, &pkey, &cols)
	if err != nil {
		return fmt.Errorf("reading layout of %s: %w", e.table, err)
	}
	if relkind != "p" {
		problems = append(problems, "not a partitioned table")
	} else if partkey == nil || *partkey != "RANGE (event_id)" {
		problems = append(problems, fmt.Sprintf("partitioned by %v, want RANGE (event_id)", deref(partkey)))
	}
	wantCols := []string{"event_id uuid not null", "consumer_group text not null", "processed_at timestamp with time zone not null"}
	if !slices.Equal(cols, wantCols) {
		problems = append(problems, fmt.Sprintf("columns are [%s], want [%s]", strings.Join(cols, ", "), strings.Join(wantCols, ", ")))
	}
	wantKey := []string{"event_id"}
	if e.table.Scope == ScopeConsumerGroup {
		wantKey = append(wantKey, "consumer_group")
	}
	if !slices.Equal(pkey, wantKey) {
		problems = append(problems, fmt.Sprintf("primary key is (%s), scope %s needs (%s)", strings.Join(pkey, ", "), e.table.Scope, strings.Join(wantKey, ", ")))
	}
	if len(problems) > 0 {
		return &LayoutError{Table: e.table.String(), Problems: problems}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return "nothing"
	}
	return *s
}
