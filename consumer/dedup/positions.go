package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The positions table keeps, per consumer group, topic and Kafka partition,
// the offset after the last batch whose transaction committed: it is written
// in that transaction, with the batch's dedup rows and effects. Kafka's
// committed offset is written after the transaction and can therefore run
// ahead of the database when the database loses committed transactions (a
// failover to an asynchronous standby); the runtime then starts from the
// database's position, and the dedup rows absorb the overlap. It is Kafka's
// "storing offsets outside Kafka" pattern, kept beside the dedup table.

// positionsSuffix names the positions table after the dedup table. It does not
// start with "_p", so it can never look like one of the table's partitions, and
// with MaxTableNameLen it stays within MaxIdentifierLen.
const positionsSuffix = "_offsets"

// positionsVersion is the layout version written into the positions marker.
const positionsVersion = 1

// PositionsTableName returns the name (in t's schema) of t's positions table:
// t's name with the suffix "_offsets".
func PositionsTableName(t Table) string { return t.WithDefaults().Name + positionsSuffix }

// positionsMarker is the COMMENT on the positions table. The table belongs to
// the dedup table it names; ownership is the dedup table's marker (an adoption
// of the dedup table carries the positions table with it).
type positionsMarker struct {
	PositionsOf string `json:"idempotency.dev/positions-of"` // schema.table
	Version     int    `json:"version"`
}

// positionsColumns is the positions table's layout as checkPositionsLayout
// reads it from pg_catalog.
var positionsColumns = []string{
	"consumer_group text not null",
	"topic text not null",
	"kafka_partition integer not null",
	"next_offset bigint not null",
	"updated_at timestamp with time zone not null",
}

func (e *Engine) positionsName() string { return PositionsTableName(e.table) }

func (e *Engine) positionsIdent() string {
	return pgx.Identifier{e.table.Schema, e.positionsName()}.Sanitize()
}

// ensurePositions creates the positions table of the dedup table (an existing
// dedup table made by an older version has none), or checks the existing one:
// it must carry the marker naming this dedup table (else *NameConflictError)
// and the expected columns (else *LayoutError). It runs after the dedup table
// was created or checked, in a session of its own.
func (e *Engine) ensurePositions(ctx context.Context) error {
	conn, release, err := e.session(ctx)
	if err != nil {
		return fmt.Errorf("ensuring positions table of %s: %w", e.table, err)
	}
	defer release()
	return e.ensurePositionsOn(ctx, conn)
}

// ensurePositionsOn is ensurePositions on a session that holds the table's advisory
// lock (EnsureTable runs it on its own session).
func (e *Engine) ensurePositionsOn(ctx context.Context, conn *pgx.Conn) error {
	ok, err := e.checkPositions(ctx, conn)
	if err != nil || ok {
		return err
	}
	marker, err := jsonLiteral(positionsMarker{PositionsOf: e.table.String(), Version: positionsVersion})
	if err != nil {
		return err
	}
	// The key names the constraint so that its index name stays within the
	// identifier limit (the default <table>_offsets_pkey could exceed it and
	// be truncated). One simple-protocol string: one implicit transaction, so
	// the table never exists without its marker.
	pos := e.positionsIdent()
	sql := fmt.Sprintf(`CREATE TABLE %s (
	consumer_group text NOT NULL,
	topic text NOT NULL,
	kafka_partition integer NOT NULL,
	next_offset bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT %s PRIMARY KEY (consumer_group, topic, kafka_partition)
);
COMMENT ON TABLE %s IS %s`, pos, pgx.Identifier{e.positionsName() + "_pk"}.Sanitize(), pos, marker)
	err = e.ddl(ctx, conn, "creating positions table "+e.positionsName(), sql)
	if isNameTaken(err) {
		if _, cerr := e.checkPositions(ctx, conn); cerr != nil {
			return cerr
		}
	}
	if err != nil {
		return fmt.Errorf("ensuring positions table of %s: %w", e.table, err)
	}
	return nil
}

// checkPositions reports whether the positions table exists and is ours with
// the expected layout; false with no error when the name is free.
func (e *Engine) checkPositions(ctx context.Context, conn *pgx.Conn) (bool, error) {
	name := e.positionsName()
	kind, of, err := e.nameTaken(ctx, conn, name)
	if err != nil {
		return false, err
	}
	if kind == "" {
		// The key's name can be taken alone (a renamed legacy table keeps
		// its index names).
		pk := name + "_pk"
		if kind, of, err = e.nameTaken(ctx, conn, pk); err != nil {
			return false, err
		}
		if kind != "" {
			return false, &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + pk, Kind: kind, Of: of, Need: "the primary key of the positions table"}
		}
		return false, nil
	}
	conflict := &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + name, Kind: kind, Of: of, Need: "the table of consumer positions"}
	if kind != "table" {
		return false, conflict
	}
	var (
		comment *string
		cols    []string
	)
	qctx, cancel := e.bounded(ctx)
	defer cancel()
	err = conn.QueryRow(qctx, `
SELECT pg_catalog.obj_description(c.oid, 'pg_class'),
       ARRAY(SELECT a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
               FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2`, e.table.Schema, name).Scan(&comment, &cols)
	if err != nil {
		return false, fmt.Errorf("reading positions table %s: %w", name, err)
	}
	if m, ok := parsePositionsMarker(comment); !ok || m.PositionsOf != e.table.String() {
		return false, conflict
	}
	if !slices.Equal(cols, positionsColumns) {
		return false, &LayoutError{Table: e.table.Schema + "." + name, Problems: []string{
			fmt.Sprintf("columns are [%s], want [%s]", strings.Join(cols, ", "), strings.Join(positionsColumns, ", "))}}
	}
	return true, nil
}

// dropPositions drops the positions table if its marker names this dedup
// table; a missing one, or one that is not ours, is left alone. DropTable calls
// it once it has established that the dedup table is ours.
func (e *Engine) dropPositions(ctx context.Context, conn *pgx.Conn) error {
	var comment *string
	qctx, cancel := e.bounded(ctx)
	err := conn.QueryRow(qctx, `
SELECT pg_catalog.obj_description(c.oid, 'pg_class')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'`, e.table.Schema, e.positionsName()).Scan(&comment)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up positions table: %w", err)
	}
	if m, ok := parsePositionsMarker(comment); !ok || m.PositionsOf != e.table.String() {
		return nil // not ours: never touched
	}
	return e.ddl(ctx, conn, "dropping positions table "+e.positionsName(), "DROP TABLE "+e.positionsIdent())
}

func parsePositionsMarker(comment *string) (positionsMarker, bool) {
	if comment == nil {
		return positionsMarker{}, false
	}
	var m positionsMarker
	if err := json.Unmarshal([]byte(*comment), &m); err != nil || m.PositionsOf == "" {
		return positionsMarker{}, false
	}
	return m, true
}

// ErrPositionsTableMissing is wrapped by Positions.Check when the dedup table
// has no positions table (it was created by an older version; the operator's
// next reconcile, or Engine.EnsureTable, adds it).
var ErrPositionsTableMissing = errors.New("positions table missing")

// Queryer is what the positions statements run on: a pgx.Tx, *pgx.Conn or
// *pgxpool.Pool.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Positions reads and records one consumer group's positions in the positions
// table of a dedup table. It sends no DDL: the engine creates the table (the
// consumer's role needs no DDL rights), the runtime only reads and writes
// rows. Safe for concurrent use.
type Positions struct {
	table     Table
	group     string
	name      string // schema.positions, for messages
	readSQL   string
	recordSQL string
}

// NewPositions validates t (after defaults) and group; no SQL is sent.
func NewPositions(t Table, group string) (*Positions, error) {
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("creating positions: %w", err)
	}
	if group == "" {
		return nil, errors.New("creating positions: empty consumer group")
	}
	id := pgx.Identifier{t.Schema, PositionsTableName(t)}.Sanitize()
	return &Positions{
		table: t,
		group: group,
		name:  t.Schema + "." + PositionsTableName(t),
		readSQL: `SELECT next_offset FROM ` + id +
			` WHERE consumer_group = $1 AND topic = $2 AND kafka_partition = $3`,
		// The old value comes from a snapshot taken before the upsert in
		// the same statement; FOR UPDATE makes a concurrent writer of the
		// same row (a member of an older generation still finishing a
		// batch) wait for this transaction instead of racing it.
		recordSQL: `WITH old AS (SELECT next_offset FROM ` + id +
			` WHERE consumer_group = $1 AND topic = $2 AND kafka_partition = $3 FOR UPDATE),
up AS (INSERT INTO ` + id + ` AS p (consumer_group, topic, kafka_partition, next_offset) VALUES ($1, $2, $3, $4)
       ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = pg_catalog.now())
SELECT (SELECT next_offset FROM old)`,
	}, nil
}

// Name is the positions table, schema-qualified, for messages.
func (p *Positions) Name() string { return p.name }

// Check verifies that the positions table exists; ErrPositionsTableMissing
// (wrapped, naming the table) if not.
func (p *Positions) Check(ctx context.Context, q Queryer) error {
	var exists bool
	// The identifiers are validated lower-case [a-z0-9_], so the unquoted
	// name is what to_regclass expects.
	if err := q.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL`, p.name).Scan(&exists); err != nil {
		return fmt.Errorf("looking up positions table %s: %w", p.name, err)
	}
	if !exists {
		return fmt.Errorf("%w: %s (dedup table %s was created by an older version; the operator, or dedup.Engine.EnsureTable, adds it)", ErrPositionsTableMissing, p.name, p.table)
	}
	return nil
}

// Read returns the stored position (the next offset to process) of a
// partition; ok is false when the group has none for it.
func (p *Positions) Read(ctx context.Context, q Queryer, topic string, partition int) (next int64, ok bool, err error) {
	err = q.QueryRow(ctx, p.readSQL, p.group, topic, partition).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading position of %s/%d in %s: %w", topic, partition, p.name, err)
	}
	return next, true, nil
}

// Partitions returns the partitions of topic the group has a position for.
func (p *Positions) Partitions(ctx context.Context, q Queryer, topic string) ([]int, error) {
	var parts []int32
	err := q.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(kafka_partition), '{}') FROM `+
		pgx.Identifier{p.table.Schema, PositionsTableName(p.table)}.Sanitize()+
		` WHERE consumer_group = $1 AND topic = $2`, p.group, topic).Scan(&parts)
	if err != nil {
		return nil, fmt.Errorf("reading the positions of %s in %s: %w", topic, p.name, err)
	}
	out := make([]int, len(parts))
	for i, v := range parts {
		out[i] = int(v)
	}
	return out, nil
}

// Record stores next as the partition's position, inside the caller's
// transaction, and returns the position it replaces (ok false: none). The
// caller compares it with what it wrote last: a smaller one means the
// database lost committed transactions.
func (p *Positions) Record(ctx context.Context, q Queryer, topic string, partition int, next int64) (prev int64, ok bool, err error) {
	var old *int64
	if err := q.QueryRow(ctx, p.recordSQL, p.group, topic, partition, next).Scan(&old); err != nil {
		return 0, false, fmt.Errorf("recording position %d of %s/%d in %s: %w", next, topic, partition, p.name, err)
	}
	if old == nil {
		return 0, false, nil
	}
	return *old, true, nil
}
