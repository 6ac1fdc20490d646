package dedup

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// nameTaken reports what holds name in the table's schema: a relation
// (kind "table", "index", "sequence", ...; of is an index's table) or a
// type that is not a relation's row type ("type"); kind "" if nothing does.
func (e *Engine) nameTaken(ctx context.Context, conn *pgx.Conn, name string) (kind, of string, err error) {
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	err = conn.QueryRow(ctx, `
SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table' WHEN 'i' THEN 'index'
                      WHEN 'I' THEN 'partitioned index' WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view'
                      WHEN 'm' THEN 'materialized view' WHEN 'c' THEN 'composite type'
                      WHEN 'f' THEN 'foreign table' ELSE 'relation' END,
       coalesce((SELECT tn.nspname || '.' || tc.relname
                   FROM pg_index x JOIN pg_class tc ON tc.oid = x.indrelid JOIN pg_namespace tn ON tn.oid = tc.relnamespace
                  WHERE x.indexrelid = c.oid), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2
UNION ALL
SELECT 'type', '' FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
 WHERE n.nspname = $1 AND t.typname = $2 AND t.typrelid = 0
LIMIT 1`, e.table.Schema, name).Scan(&kind, &of)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("looking up the name %s: %w", name, err)
	}
	return kind, of, nil
}

// Observe reads the table's state from pg_catalog. A missing table is a
// State with Exists false, not an error.
//
// It runs under the engine's lock_timeout: pg_get_expr, which renders the
// partition bounds, takes ACCESS SHARE on every partition it reads (checked
// on PostgreSQL 15.18), so a partition held in ACCESS EXCLUSIVE (a detach in
// its last step, someone's VACUUM FULL) makes Observe fail with a retryable
// *LockError rather than wait.
func (e *Engine) Observe(ctx context.Context) (State, error) {
	conn, release, err := e.conn(ctx)
	if err != nil {
		return State{}, fmt.Errorf("observing %s: %w", e.table, err)
	}
	defer release(false)
	st, err := e.observe(ctx, conn)
	if err != nil {
		return State{}, fmt.Errorf("observing %s: %w", e.table, err)
	}
	return st, nil
}

func (e *Engine) observe(ctx context.Context, conn *pgx.Conn) (State, error) {
	// A handful of catalog reads: one bound for all of them.
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	var st State
	var (
		oid     uint32
		comment *string
	)
	err := conn.QueryRow(ctx, `
SELECT c.oid, pg_catalog.obj_description(c.oid, 'pg_class')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2`, e.table.Schema, e.table.Name).Scan(&oid, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("looking up table: %w", err)
	}
	st.Exists = true
	if comment != nil {
		if m, ok := parseMarker(*comment); ok {
			st.Marker, st.Owner = m, m.Owner
		}
	}

	rows, err := conn.Query(ctx, `
SELECT n.nspname::text, c.relname::text, pg_catalog.pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending, c.reltuples::bigint
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE i.inhparent = $1`, oid)
	if err != nil {
		return st, lockErr("listing partitions", err)
	}
	for rows.Next() {
		var (
			schema, name, bound string
			p                   ObservedPartition
		)
		if err := rows.Scan(&schema, &name, &bound, &p.DetachPending, &p.Rows); err != nil {
			rows.Close()
			return st, lockErr("listing partitions", err)
		}
		p.Name = name
		if schema != e.table.Schema {
			p.Name = schema + "." + name
		}
		if err := parseBound(&p, bound); err != nil {
			rows.Close()
			return st, err
		}
		st.Partitions = append(st.Partitions, p)
	}
	if err := rows.Err(); err != nil {
		return st, lockErr("listing partitions", err)
	}
	sort.Slice(st.Partitions, func(i, j int) bool {
		a, b := st.Partitions[i], st.Partitions[j]
		if a.Default != b.Default {
			return b.Default
		}
		return lessUUID(a.keyRange().lo, b.keyRange().lo) || (a.keyRange().lo == b.keyRange().lo && a.Name < b.Name)
	})
	for _, p := range st.Partitions {
		if _, ok := ownPartition(p, e.table.Interval, e.table.Name); !ok {
			st.Foreign = append(st.Foreign, p.Name)
		}
	}
	sort.Strings(st.Foreign)
	st.Window = WindowOf(st.Partitions)

	if st.Owner != "" {
		if st.Orphans, err = e.orphans(ctx, conn, st.Owner); err != nil {
			return st, err
		}
	}
	return st, nil
}

// relState is where one of our relations stands in the drop protocol.
type relState int

const (
	relGone relState = iota
	relStandalone
	relAttached
	relDetachPending
)

func (e *Engine) relState(ctx context.Context, conn *pgx.Conn, name string) (relState, error) {
	var (
		exists, attached, pending bool
	)
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	err := conn.QueryRow(ctx, `
SELECT true, i.inhrelid IS NOT NULL, coalesce(i.inhdetachpending, false)
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
 WHERE n.nspname = $1 AND c.relname = $2`, e.table.Schema, name).Scan(&exists, &attached, &pending)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return relGone, nil
	case err != nil:
		return relGone, fmt.Errorf("looking up %s: %w", name, err)
	case pending:
		return relDetachPending, nil
	case attached:
		return relAttached, nil
	}
	return relStandalone, nil
}

// orphans lists the standalone tables that are ours: named like one of our
// partitions and carrying our partition marker with matching bounds.
func (e *Engine) orphans(ctx context.Context, conn *pgx.Conn, owner string) ([]Partition, error) {
	tables, err := e.markedTables(ctx, conn, owner, false, "listing standalone partition tables")
	if err != nil {
		return nil, err
	}
	out := make([]Partition, 0, len(tables))
	for _, t := range tables {
		out = append(out, t.Partition)
	}
	return out, nil
}

// markedPartitions lists the relations whose partition marker names from
// and which belong to this table: its attached partitions of ours (by name
// and bounds, pending detach included) and standalone tables named like
// our partitions, each with a marker for this table and the bounds its
// name implies. A partition of some other table, or one whose marker does
// not name from, is not listed (never touched).
func (e *Engine) markedPartitions(ctx context.Context, conn *pgx.Conn, st State, from string) ([]Partition, error) {
	own := make(map[string]bool)
	for _, p := range st.Partitions {
		if op, ok := ownPartition(p, e.table.Interval, e.table.Name); ok {
			own[op.Name] = true
		}
	}
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	tables, err := e.markedTables(ctx, conn, from, true, "listing partition markers")
	if err != nil {
		return nil, err
	}
	var out []Partition
	for _, t := range tables {
		if t.isPartition && (!t.ofTable || !own[t.Name]) {
			continue // someone else's partition, or a foreign one of ours
		}
		out = append(out, t.Partition)
	}
	return out, nil
}

// markedTable is a table named like one of our partitions whose partition
// marker names this table, the owner asked for and the bounds its name
// implies.
type markedTable struct {
	Partition
	isPartition bool // attached (or pending detach) to some table
	ofTable     bool // to this table
}

// markedTablesSQL lists the tables of schema $1 whose names start with
// <table>_p: the range [$2, $3) = [<table>_p, <table>_q) of pg_class's index
// on relname, as name compares bytewise (collation C). A condition the index
// cannot use (left(relname, n)) read all of pg_class, some ten rows per
// object in a database of many tables, on every observe: quadratic in the
// number of tables when each is maintained.
const markedTablesSQL = `
SELECT c.relname::text, coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), ''), c.relispartition,
       c.relispartition AND EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                WHERE i.inhrelid = c.oid AND p.relnamespace = c.relnamespace AND p.relname = $4)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname >= $2::name AND c.relname < $3::name AND ($5 OR NOT c.relispartition)
 ORDER BY c.relname`

// markedTables is the one catalog scan for the tables that carry our
// partition marker: the standalone ones only, or (attached) the attached
// ones too, in name order. A table whose name or marker does not match is
// left out: never touched. op prefixes the errors.
func (e *Engine) markedTables(ctx context.Context, conn *pgx.Conn, owner string, attached bool, op string) ([]markedTable, error) {
	rows, err := conn.Query(ctx, markedTablesSQL, e.table.Schema, e.table.Name+"_p", e.table.Name+"_q", e.table.Name, attached)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []markedTable
	for rows.Next() {
		var (
			name, comment string
			t             markedTable
		)
		if err := rows.Scan(&name, &comment, &t.isPartition, &t.ofTable); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		from, ok := ParsePartitionName(e.table.Name, e.table.Interval, name)
		if !ok {
			continue
		}
		t.Partition = e.table.Interval.partition(e.table.Name, from)
		m, ok := parsePartitionMarker(comment)
		lo, hi := t.Bounds()
		if !ok || m.PartitionOf != e.table.String() || m.Owner != owner || m.From != lo.String() || m.To != hi.String() {
			continue
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// observeOwned observes the table and checks that it is ours as EnsureTable
// left it: it exists (else ErrTableNotFound), carries a marker, and the
// marker still names this Engine's owner (else *OwnershipError: adopted by
// another object since this Engine's EnsureTable).
func (e *Engine) observeOwned(ctx context.Context, conn *pgx.Conn) (State, error) {
	st, err := e.observe(ctx, conn)
	if err != nil {
		return st, err
	}
	if !st.Exists {
		return st, ErrTableNotFound
	}
	if st.Owner == "" {
		return st, &OwnershipError{Table: e.table.String()}
	}
	if want := e.ensuredOwner(); want != "" && st.Owner != want {
		return st, &OwnershipError{Table: e.table.String(), Owner: st.Owner}
	}
	return st, e.checkKind(st)
}
