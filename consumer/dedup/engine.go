package dedup

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of the Engine options.
const (
	DefaultLockTimeout      = 500 * time.Millisecond
	DefaultAttempts         = 5
	DefaultBackoff          = 100 * time.Millisecond
	DefaultMaxBackoff       = 2 * time.Second
	DefaultAdvisoryLockWait = 30 * time.Second
	DefaultStatementTimeout = time.Minute
)

// clientGrace is how much longer than statement_timeout the client waits
// for an answer before it gives up on the connection: the server normally
// cancels the statement first and the connection stays usable; the client
// deadline is the backstop for a server or network that does not answer.
const clientGrace = 5 * time.Second

// Step names a point in the maintenance protocol, passed to a StepHook.
type Step string

// The steps a StepHook sees, in protocol order for one partition.
const (
	// StepCreated: the standalone child exists (with its CHECK constraint
	// and marker) but is not attached yet.
	StepCreated Step = "created"
	// StepAttached: the child is attached as a partition.
	StepAttached Step = "attached"
	// StepDetached: the partition is detached (standalone) but not dropped.
	StepDetached Step = "detached"
	// StepDropped: the detached table is dropped.
	StepDropped Step = "dropped"
	// StepMarkerRewritten (Adopt): one partition's marker, attached or
	// standalone, names the new owner, inside the adoption's transaction
	// (not committed yet).
	StepMarkerRewritten Step = "marker-rewritten"
	// StepTableAdopted (Adopt): the table's own marker names the new owner,
	// the last statement before the adoption's transaction commits; the
	// hook gets the table's name.
	StepTableAdopted Step = "table-adopted"
)

// StepHook is called after each maintenance step with the partition's name.
// An error aborts the run with that error, as a crash at that point would
// (for Adopt's steps: the transaction is rolled back): tests use it to
// interrupt maintenance between steps.
type StepHook func(ctx context.Context, step Step, partition string) error

// Option configures an Engine.
type Option func(*engineConfig)

type engineConfig struct {
	lockTimeout      time.Duration
	attempts         int
	backoff          time.Duration
	maxBackoff       time.Duration
	advisoryLockWait time.Duration
	statementTimeout time.Duration
	hook             StepHook
}

// WithLockTimeout sets the lock_timeout of every DDL statement (default
// 500ms). It bounds how long an insert can queue behind a DDL lock request.
func WithLockTimeout(d time.Duration) Option { return func(c *engineConfig) { c.lockTimeout = d } }

// WithAttempts sets how many times a DDL statement that hit lock_timeout is
// tried before Maintain gives up with a *LockError (default 5).
func WithAttempts(n int) Option { return func(c *engineConfig) { c.attempts = n } }

// WithBackoff sets the first and the largest pause between attempts
// (default 100ms, doubling with jitter up to 2s).
func WithBackoff(initial, max time.Duration) Option {
	return func(c *engineConfig) { c.backoff, c.maxBackoff = initial, max }
}

// WithAdvisoryLockWait sets how long a maintainer waits for another one
// holding the table's advisory lock (default 30s).
func WithAdvisoryLockWait(d time.Duration) Option {
	return func(c *engineConfig) { c.advisoryLockWait = d }
}

// WithStatementTimeout bounds every statement the engine sends (default one
// minute; it must exceed the lock timeout). The server cancels a statement
// that runs longer (statement_timeout) and the client abandons the
// connection shortly after if the server does not answer, so no call of the
// engine waits forever, whatever the caller's context.
func WithStatementTimeout(d time.Duration) Option {
	return func(c *engineConfig) { c.statementTimeout = d }
}

// WithStepHook installs a hook called after each maintenance step, for fault
// injection in tests.
func WithStepHook(h StepHook) Option { return func(c *engineConfig) { c.hook = h } }

// Engine manages one dedup table: it creates it, keeps its partitions and
// drops it. Its methods are safe for concurrent use; maintainers of the same
// table, in this process or another, serialise on a session advisory lock.
type Engine struct {
	pool  *pgxpool.Pool
	table Table
	cfg   engineConfig

	mu    sync.Mutex
	owner string // set by a successful EnsureTable or Adopt; Maintain checks it
}

// State is the table as observed in pg_catalog.
type State struct {
	Exists bool
	// Owner is the owner in the table's marker; "" when unmarked.
	Owner string
	// Marker is the table's parsed ownership marker (zero when unmarked).
	Marker Marker
	// Partitions are all attached partitions, ours and foreign, sorted by
	// lower bound, with their bounds and row estimates.
	Partitions []ObservedPartition
	// Window covers the attached partitions not pending detach.
	Window Window
	// Foreign names attached partitions that are not ours.
	Foreign []string
	// Orphans are standalone tables of ours (named and marked as our
	// partitions) that are not attached: left by a crash between create and
	// attach, or between detach and drop. Maintain adopts or drops them.
	Orphans []Partition
}

// Result reports what Maintain did.
type Result struct {
	Created []Partition // created (or adopted) and attached, oldest first
	Dropped []Partition // detached and dropped, including orphans, oldest first
	// Finalized names partitions whose interrupted detach was completed.
	Finalized []string
	// Window is the dedup window after the run.
	Window Window
	// Partitions are the attached partitions after the run, ours and
	// foreign, as State.Partitions reports them (sorted by lower bound, with
	// bounds, detach-pending flags and row estimates), so a caller need not
	// Observe again. Like Window and Foreign they are read after a failed
	// step too; all three stay empty if that final read fails.
	Partitions []ObservedPartition
	// Foreign names attached partitions that are not ours (left alone).
	Foreign []string
}

// NewEngine validates t (after defaults) and returns an engine for it. No SQL
// is sent.
func NewEngine(pool *pgxpool.Pool, t Table, opts ...Option) (*Engine, error) {
	if pool == nil {
		return nil, errors.New("creating dedup engine: nil pool")
	}
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	cfg := engineConfig{
		lockTimeout:      DefaultLockTimeout,
		attempts:         DefaultAttempts,
		backoff:          DefaultBackoff,
		maxBackoff:       DefaultMaxBackoff,
		advisoryLockWait: DefaultAdvisoryLockWait,
		statementTimeout: DefaultStatementTimeout,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.lockTimeout < time.Millisecond || cfg.attempts < 1 || cfg.backoff < 0 || cfg.maxBackoff < cfg.backoff || cfg.advisoryLockWait < 0 || cfg.statementTimeout <= cfg.lockTimeout {
		return nil, errors.New("creating dedup engine: lock timeout must be >= 1ms, attempts >= 1, 0 <= backoff <= max backoff, advisory lock wait >= 0, statement timeout > lock timeout")
	}
	return &Engine{pool: pool, table: t, cfg: cfg}, nil
}

// Table returns the engine's table, with defaults applied.
func (e *Engine) Table() Table { return e.table }

// EnsureTable creates the schema (if missing), the partitioned table and its
// ownership marker for owner, or checks an existing table: it must carry
// owner's marker (else *OwnershipError) and the requested layout (else
// *LayoutError). It creates no partitions; Maintain does.
//
// After it succeeds, this Engine's Maintain refuses (*OwnershipError) a
// table whose marker has come to name another owner meanwhile (adopted by
// another object between the two calls).
func (e *Engine) EnsureTable(ctx context.Context, owner string) error {
	err := e.ensureTable(ctx, owner)
	if err == nil {
		err = e.ensurePositions(ctx) // positions.go; added to tables of older versions too
	}
	if err == nil {
		err = e.ensureClaim(ctx) // claim.go; installed or upgraded on every ensure
	}
	if err == nil {
		e.setOwner(owner)
	}
	return err
}

func (e *Engine) setOwner(owner string) {
	e.mu.Lock()
	e.owner = owner
	e.mu.Unlock()
}

func (e *Engine) ensuredOwner() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owner
}

func (e *Engine) ensureTable(ctx context.Context, owner string) error {
	if err := ValidateOwner(owner); err != nil {
		return fmt.Errorf("ensuring table %s: %w", e.table, err)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return fmt.Errorf("ensuring table %s: %w", e.table, err)
	}
	defer release()
	st, err := e.observe(ctx, conn)
	if err != nil {
		return fmt.Errorf("ensuring table %s: %w", e.table, err)
	}
	if st.Exists {
		if st.Owner != owner {
			return &OwnershipError{Table: e.table.String(), Owner: st.Owner}
		}
		return e.checkLayout(ctx, conn, st)
	}
	if err := e.createTable(ctx, conn, owner); err != nil {
		var nc *NameConflictError
		if errors.As(err, &nc) {
			return err
		}
		return fmt.Errorf("ensuring table %s: %w", e.table, err)
	}
	return nil
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

// isNameTaken reports SQLSTATE 42P07 (duplicate_table: a relation of that
// name exists) and 42710 (duplicate_object: e.g. a type of that name).
func isNameTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "42710")
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
	marker, err := jsonLiteral(Marker{Owner: owner, Scope: e.table.Scope, Interval: e.table.Interval, Version: markerVersion})
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
	// arrive in processed_at order.
	sql := fmt.Sprintf(`CREATE TABLE %s (
	event_id uuid NOT NULL,
	consumer_group text NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT %s PRIMARY KEY (%s)
) PARTITION BY RANGE (event_id);
CREATE INDEX ON %s USING brin (processed_at);
COMMENT ON TABLE %s IS %s`,
		parent, pgx.Identifier{e.table.Name + "_pkey"}.Sanitize(), key, parent, parent, marker)
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
       CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END,
       ARRAY(SELECT a.attname::text
               FROM pg_constraint con
               CROSS JOIN LATERAL unnest(con.conkey) WITH ORDINALITY k(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
              WHERE con.conrelid = c.oid AND con.contype = 'p' ORDER BY k.ord),
       ARRAY(SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
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
SELECT c.oid, obj_description(c.oid, 'pg_class')
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
SELECT n.nspname::text, c.relname::text, pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending, c.reltuples::bigint
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
	st.Window = newCoverage(st.Partitions).window()

	if st.Owner != "" {
		if st.Orphans, err = e.orphans(ctx, conn, st.Owner); err != nil {
			return st, err
		}
	}
	return st, nil
}

// orphans lists the standalone tables that are ours: named like one of our
// partitions and carrying our partition marker with matching bounds.
func (e *Engine) orphans(ctx context.Context, conn *pgx.Conn, owner string) ([]Partition, error) {
	prefix := e.table.Name + "_p"
	rows, err := conn.Query(ctx, `
SELECT c.relname::text, coalesce(obj_description(c.oid, 'pg_class'), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relkind = 'r' AND NOT c.relispartition AND left(c.relname, $2) = $3
 ORDER BY c.relname`, e.table.Schema, len(prefix), prefix)
	if err != nil {
		return nil, fmt.Errorf("listing standalone partition tables: %w", err)
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		var name, comment string
		if err := rows.Scan(&name, &comment); err != nil {
			return nil, fmt.Errorf("listing standalone partition tables: %w", err)
		}
		from, ok := ParsePartitionName(e.table.Name, e.table.Interval, name)
		if !ok {
			continue
		}
		p := e.table.Interval.partition(e.table.Name, from)
		m, ok := parsePartitionMarker(comment)
		lo, hi := p.Bounds()
		if !ok || m.PartitionOf != e.table.String() || m.Owner != owner || m.From != lo.String() || m.To != hi.String() {
			continue // not ours: never touched
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing standalone partition tables: %w", err)
	}
	return out, nil
}

// Maintain brings the partitions in line with PlanPartitions(now, premake,
// retention): creates missing partitions (the current and future ones first,
// adopting a standalone table left by an interrupted run), completes
// interrupted detaches, drops expired partitions and leftover detached
// tables, without ever taking a lock that blocks inserts. It stops at the
// first step that fails and returns what it did so far; a *LockError
// (IsRetryable) means a lock stayed busy: run it again later.
func (e *Engine) Maintain(ctx context.Context, now time.Time, premake int, retention time.Duration) (Result, error) {
	var res Result
	if err := ValidatePolicy(e.table.Interval, premake, retention); err != nil {
		return res, fmt.Errorf("maintaining %s: %w", e.table, err)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return res, fmt.Errorf("maintaining %s: %w", e.table, err)
	}
	defer release()
	err = e.maintain(ctx, conn, now, premake, retention, &res)
	byFrom := func(a, b Partition) int { return a.From.Compare(b.From) }
	slices.SortFunc(res.Created, byFrom)
	slices.SortFunc(res.Dropped, byFrom)
	// Report the window as it is now, also after a failed step.
	if st, oerr := e.observe(ctx, conn); oerr == nil {
		res.Window, res.Partitions, res.Foreign = st.Window, st.Partitions, st.Foreign
	}
	if err != nil {
		return res, fmt.Errorf("maintaining %s: %w", e.table, err)
	}
	return res, nil
}

func (e *Engine) maintain(ctx context.Context, conn *pgx.Conn, now time.Time, premake int, retention time.Duration, res *Result) error {
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
		// Adopted by another object since this Engine's EnsureTable.
		return &OwnershipError{Table: e.table.String(), Owner: st.Owner}
	}
	plan := PlanPartitions(now, e.table.Interval, premake, retention, e.table.Name, st.Partitions)
	orphans := make(map[string]bool)
	for _, o := range st.Orphans {
		orphans[o.Name] = true
	}

	// Creating comes first: a missing current or next partition makes
	// inserts fail, an expired one only costs disk.
	for _, p := range createOrder(plan.Create, e.table.Interval.Floor(now)) {
		if err := e.createPartition(ctx, conn, p, st.Owner, orphans[p.Name]); err != nil {
			return err
		}
		delete(orphans, p.Name)
		res.Created = append(res.Created, p)
	}

	// A kept partition of ours left pending detach (a detach interrupted
	// after its first transaction, under another retention) is completed
	// and attached again, so its range accepts inserts.
	for _, p := range st.Partitions {
		if !p.DetachPending {
			continue
		}
		own, ok := ownPartition(p, e.table.Interval, e.table.Name)
		if !ok || slices.ContainsFunc(plan.Drop, func(d Partition) bool { return d.Name == own.Name }) {
			continue
		}
		if err := e.detach(ctx, conn, own); err != nil {
			return err
		}
		res.Finalized = append(res.Finalized, own.Name)
		if err := e.createPartition(ctx, conn, own, st.Owner, true); err != nil {
			return err
		}
		res.Created = append(res.Created, own)
	}

	for _, p := range plan.Drop {
		pending := slices.ContainsFunc(st.Partitions, func(o ObservedPartition) bool { return o.Name == p.Name && o.DetachPending })
		if err := e.detach(ctx, conn, p); err != nil {
			return err
		}
		if pending {
			res.Finalized = append(res.Finalized, p.Name)
		}
		if err := e.dropDetached(ctx, conn, p); err != nil {
			return err
		}
		res.Dropped = append(res.Dropped, p)
	}

	// Leftovers of an interrupted drop (detached, not dropped) go once
	// expired; a standalone table still inside the window was adopted above.
	keepFrom := now.Add(-retention)
	for _, o := range st.Orphans {
		if !orphans[o.Name] || o.To.After(keepFrom) {
			continue
		}
		if err := e.dropDetached(ctx, conn, o); err != nil {
			return err
		}
		res.Dropped = append(res.Dropped, o)
	}
	return nil
}

// createOrder puts the slots from the current one onwards first (ascending),
// then the older ones, newest first.
func createOrder(ps []Partition, current time.Time) []Partition {
	var ahead, behind []Partition
	for _, p := range ps {
		if p.From.Before(current) {
			behind = append(behind, p)
		} else {
			ahead = append(ahead, p)
		}
	}
	slices.Reverse(behind)
	return append(ahead, behind...)
}

const boundsConstraint = "idempotency_bounds"

// createPartition creates p as a standalone table (or adopts the standalone
// table an interrupted run left) and attaches it. The CHECK constraint
// matching the bounds lets ATTACH skip the validation scan; it is kept
// afterwards so a detached table stays self-describing and can be attached
// again without a scan.
func (e *Engine) createPartition(ctx context.Context, conn *pgx.Conn, p Partition, owner string, adopt bool) error {
	child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
	lo, hi := p.Bounds()
	check := fmt.Sprintf(`CHECK (event_id >= '%s'::uuid AND event_id < '%s'::uuid)`, lo, hi)
	if adopt {
		var has bool
		qctx, cancel := e.bounded(ctx)
		err := conn.QueryRow(qctx, `SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = $1::regclass AND conname = $2 AND contype = 'c')`,
			child, boundsConstraint).Scan(&has)
		cancel()
		if err != nil {
			return fmt.Errorf("inspecting standalone table %s: %w", p.Name, err)
		}
		if !has {
			sql := fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`, child, boundsConstraint, check)
			if err := e.ddl(ctx, conn, "adding bounds to standalone table "+p.Name, sql); err != nil {
				return err
			}
		}
	} else {
		marker, err := jsonLiteral(partitionMarker{PartitionOf: e.table.String(), Owner: owner, From: lo.String(), To: hi.String()})
		if err != nil {
			return err
		}
		sql := fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL, CONSTRAINT %s %s);\nCOMMENT ON TABLE %s IS %s",
			child, e.parent(), boundsConstraint, check, child, marker)
		if err := e.ddl(ctx, conn, "creating table for partition "+p.Name, sql); err != nil {
			if isNameTaken(err) {
				// Not an orphan of ours (observe would have adopted it):
				// someone else's relation or type has the partition's name.
				kind, of, lerr := e.nameTaken(ctx, conn, p.Name)
				if lerr == nil && kind != "" {
					return &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + p.Name, Kind: kind, Of: of,
						Need: "partition " + p.Name + " for [" + p.From.UTC().Format(time.RFC3339) + ", " + p.To.UTC().Format(time.RFC3339) + ")"}
				}
			}
			return err
		}
	}
	if err := e.step(ctx, StepCreated, p.Name); err != nil {
		return err
	}
	sql := fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`, e.parent(), child, lo, hi)
	if err := e.ddl(ctx, conn, "attaching partition "+p.Name, sql); err != nil {
		return err
	}
	return e.step(ctx, StepAttached, p.Name)
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

// detach detaches p with DETACH CONCURRENTLY, which takes only SHARE UPDATE
// EXCLUSIVE on the parent and waits for the transactions using the partition
// instead of locking them out. Its second transaction can fail (lock_timeout
// while waiting, a crash); the partition is then left "detach pending" and
// the next attempt completes it with FINALIZE. The state is re-read before
// every attempt, so each attempt does the one statement that is still due.
func (e *Engine) detach(ctx context.Context, conn *pgx.Conn, p Partition) error {
	child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
	for attempt := 1; ; attempt++ {
		rs, err := e.relState(ctx, conn, p.Name)
		if err != nil {
			return err
		}
		var sql, op string
		switch rs {
		case relGone, relStandalone:
			return e.step(ctx, StepDetached, p.Name)
		case relAttached:
			op = "detaching partition " + p.Name
			sql = fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY`, e.parent(), child)
		case relDetachPending:
			op = "finalizing the detach of partition " + p.Name
			sql = fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s FINALIZE`, e.parent(), child)
		}
		err = e.exec(ctx, conn, sql)
		if err == nil {
			continue // re-read: the next round reports it standalone
		}
		if !isLockTimeout(err) {
			return fmt.Errorf("%s: %w", op, err)
		}
		if attempt >= e.cfg.attempts {
			return &LockError{Op: op, Attempts: attempt, Err: err}
		}
		if err := e.sleep(ctx, attempt); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
}

// dropDetached drops p once it is a standalone table; an attached one is
// never dropped here (DROP of a partition locks the parent).
func (e *Engine) dropDetached(ctx context.Context, conn *pgx.Conn, p Partition) error {
	rs, err := e.relState(ctx, conn, p.Name)
	if err != nil {
		return err
	}
	switch rs {
	case relGone:
		return e.step(ctx, StepDropped, p.Name)
	case relAttached, relDetachPending:
		return fmt.Errorf("dropping %s: it is still a partition", p.Name)
	}
	sql := "DROP TABLE " + pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
	if err := e.ddl(ctx, conn, "dropping detached table "+p.Name, sql); err != nil {
		return err
	}
	return e.step(ctx, StepDropped, p.Name)
}

// DropTable drops the table, its partitions and leftover standalone tables
// of ours, if its marker names owner; *OwnershipError otherwise. It refuses
// while foreign partitions are attached (dropping the parent would drop
// them). A missing table is not an error.
func (e *Engine) DropTable(ctx context.Context, owner string) error {
	if err := ValidateOwner(owner); err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	defer release()
	st, err := e.observe(ctx, conn)
	if err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	if !st.Exists {
		return nil
	}
	if st.Owner != owner {
		return &OwnershipError{Table: e.table.String(), Owner: st.Owner}
	}
	if len(st.Foreign) > 0 {
		return fmt.Errorf("dropping table %s: foreign partitions attached (%s); detach them first", e.table, strings.Join(st.Foreign, ", "))
	}
	// The positions go first: a run cut short after them leaves a table
	// that EnsureTable completes again, never positions without a table.
	if err := e.dropPositions(ctx, conn); err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	// One partition per statement, then the parent: dropping a table frees
	// its files at commit, which takes time in proportion to their size, and
	// each statement must fit in the statement timeout. A run cut short
	// leaves an owned table with fewer partitions; the next one goes on.
	for _, p := range st.Partitions {
		if p.DetachPending {
			continue // dropped with the parent
		}
		child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
		if err := e.ddl(ctx, conn, "dropping partition "+p.Name, "DROP TABLE "+child); err != nil {
			return fmt.Errorf("dropping table %s: %w", e.table, err)
		}
	}
	if err := e.ddl(ctx, conn, "dropping table "+e.table.String(), "DROP TABLE "+e.parent()); err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	for _, o := range st.Orphans {
		if err := e.dropDetached(ctx, conn, o); err != nil {
			return fmt.Errorf("dropping table %s: %w", e.table, err)
		}
	}
	return nil
}

// AdoptResult reports what Adopt did.
type AdoptResult struct {
	// Created: the table did not exist and was created for the new owner
	// (as EnsureTable would).
	Created bool
	// Adopted: the table's marker named the previous owner and now names
	// the new one.
	Adopted bool
	// Partitions names the partitions (attached, pending detach, or
	// standalone tables left by an interrupted run) whose markers were
	// rewritten from the previous owner to the new one, in name order.
	Partitions []string
}

// Adopt is EnsureTable for an owner that takes the table over from a
// previous owner, from: a table whose marker names from (and whose layout
// matches) is given to owner; anything else is handled as EnsureTable
// handles it.
//
//   - The marker names from: the layout is checked first (*LayoutError,
//     nothing changed), then the markers of the table and of its partitions
//     that name from (attached, pending detach, and the standalone tables
//     an interrupted run left, which Maintain then recognises) are rewritten
//     to name owner, in one transaction under the table's advisory lock. A
//     crash or an error at any point rolls all of it back, so the next call
//     starts over from the same state. COMMENT takes SHARE UPDATE EXCLUSIVE
//     on each table, which inserts do not wait for; a busy lock is retried
//     like the other DDL, then reported as a *LockError.
//   - The marker already names owner (adopted before, or created by owner):
//     the layout is checked, and any partition marker still naming from (a
//     table marker rewritten by hand) is rewritten; otherwise nothing
//     changes, so calling Adopt again is harmless.
//   - The table does not exist: it is created for owner.
//   - No marker, or a third owner's: *OwnershipError with AdoptFrom set;
//     nothing changes. A table without a marker is never adopted.
//
// Adopting is a decision for whoever knows the previous owner is gone for
// good: two processes (two clusters) may share a database, and the previous
// owner's maintenance stops working once its marker is gone.
func (e *Engine) Adopt(ctx context.Context, owner, from string) (AdoptResult, error) {
	res, err := e.adopt(ctx, owner, from)
	if err == nil {
		err = e.ensurePositions(ctx) // positions.go; it follows the dedup table's owner
	}
	if err == nil {
		e.setOwner(owner)
	}
	return res, err
}

func (e *Engine) adopt(ctx context.Context, owner, from string) (AdoptResult, error) {
	var res AdoptResult
	if err := ValidateOwner(owner); err != nil {
		return res, fmt.Errorf("adopting table %s: %w", e.table, err)
	}
	if err := ValidateOwner(from); err != nil {
		return res, fmt.Errorf("adopting table %s: previous owner: %w", e.table, err)
	}
	if from == owner {
		return res, e.EnsureTable(ctx, owner)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return res, fmt.Errorf("adopting table %s: %w", e.table, err)
	}
	defer release()
	for attempt := 1; ; attempt++ {
		st, err := e.observe(ctx, conn)
		if err != nil {
			return res, fmt.Errorf("adopting table %s: %w", e.table, err)
		}
		if !st.Exists {
			if err := e.createTable(ctx, conn, owner); err != nil {
				var nc *NameConflictError
				if errors.As(err, &nc) {
					return res, err
				}
				return res, fmt.Errorf("adopting table %s: %w", e.table, err)
			}
			res.Created = true
			return res, nil
		}
		switch st.Owner {
		case owner, from:
		default:
			return res, &OwnershipError{Table: e.table.String(), Owner: st.Owner, AdoptFrom: from}
		}
		if err := e.checkLayout(ctx, conn, st); err != nil {
			return res, err
		}
		parts, err := e.markedPartitions(ctx, conn, st, from)
		if err != nil {
			return res, fmt.Errorf("adopting table %s: %w", e.table, err)
		}
		adoptTable := st.Owner == from
		if !adoptTable && len(parts) == 0 {
			return res, nil // already ours: nothing to do
		}
		err = e.rewriteMarkers(ctx, conn, st.Marker, owner, from, parts, adoptTable)
		if err == nil {
			res.Adopted = adoptTable
			for _, p := range parts {
				res.Partitions = append(res.Partitions, p.Name)
			}
			return res, nil
		}
		op := "rewriting the ownership markers of " + e.table.String()
		if !isLockTimeout(err) {
			return res, fmt.Errorf("%s: %w", op, err)
		}
		if attempt >= e.cfg.attempts {
			return res, &LockError{Op: op, Attempts: attempt, Err: err}
		}
		if err := e.sleep(ctx, attempt); err != nil {
			return res, fmt.Errorf("%s: %w", op, err)
		}
	}
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
	prefix := e.table.Name + "_p"
	rows, err := conn.Query(ctx, `
SELECT c.relname::text, coalesce(obj_description(c.oid, 'pg_class'), ''), c.relispartition,
       EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                WHERE i.inhrelid = c.oid AND p.relnamespace = c.relnamespace AND p.relname = $4)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relkind = 'r' AND left(c.relname, $2) = $3
 ORDER BY c.relname`, e.table.Schema, len(prefix), prefix, e.table.Name)
	if err != nil {
		return nil, fmt.Errorf("listing partition markers: %w", err)
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		var (
			name, comment       string
			isPartition, ofOurs bool
		)
		if err := rows.Scan(&name, &comment, &isPartition, &ofOurs); err != nil {
			return nil, fmt.Errorf("listing partition markers: %w", err)
		}
		if isPartition && (!ofOurs || !own[name]) {
			continue // someone else's partition, or a foreign one of ours
		}
		start, ok := ParsePartitionName(e.table.Name, e.table.Interval, name)
		if !ok {
			continue
		}
		p := e.table.Interval.partition(e.table.Name, start)
		lo, hi := p.Bounds()
		m, ok := parsePartitionMarker(comment)
		if !ok || m.PartitionOf != e.table.String() || m.Owner != from || m.From != lo.String() || m.To != hi.String() {
			continue
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing partition markers: %w", err)
	}
	return out, nil
}

// rewriteMarkers gives the partitions' markers (and, with table, the
// table's) to owner in one transaction, the table's last. Any error rolls
// the transaction back; the connection is discarded by the session's
// release if the rollback cannot be sent.
func (e *Engine) rewriteMarkers(ctx context.Context, conn *pgx.Conn, tm Marker, owner, from string, parts []Partition, table bool) (err error) {
	if err := e.exec(ctx, conn, "BEGIN"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = e.exec(ctx, conn, "ROLLBACK")
		}
	}()
	for _, p := range parts {
		lo, hi := p.Bounds()
		marker, err := jsonLiteral(partitionMarker{PartitionOf: e.table.String(), Owner: owner, From: lo.String(), To: hi.String()})
		if err != nil {
			return err
		}
		child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
		if err := e.exec(ctx, conn, "COMMENT ON TABLE "+child+" IS "+marker); err != nil {
			return fmt.Errorf("partition %s: %w", p.Name, err)
		}
		if err := e.step(ctx, StepMarkerRewritten, p.Name); err != nil {
			return err
		}
	}
	if table {
		tm.Owner, tm.AdoptedFrom = owner, from
		marker, err := jsonLiteral(tm)
		if err != nil {
			return err
		}
		if err := e.exec(ctx, conn, "COMMENT ON TABLE "+e.parent()+" IS "+marker); err != nil {
			return fmt.Errorf("table %s: %w", e.table, err)
		}
		if err := e.step(ctx, StepTableAdopted, e.table.Name); err != nil {
			return err
		}
	}
	return e.exec(ctx, conn, "COMMIT")
}

func (e *Engine) parent() string { return pgx.Identifier{e.table.Schema, e.table.Name}.Sanitize() }

func (e *Engine) step(ctx context.Context, s Step, partition string) error {
	if e.cfg.hook == nil {
		return nil
	}
	return e.cfg.hook(ctx, s, partition)
}

// conn takes a pool connection with the engine's lock_timeout and
// statement_timeout set. release(maybeLocked) resets them and returns the
// connection, or closes it when its state is unknown: after an error, in a
// transaction, or when it may hold the table's advisory lock that could not
// be released. Closing ends the backend, and so frees whatever it held.
func (e *Engine) conn(ctx context.Context) (*pgx.Conn, func(maybeLocked bool), error) {
	actx, cancel := e.bounded(ctx)
	pc, err := e.pool.Acquire(actx)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("acquiring connection: %w", err)
	}
	conn := pc.Conn()
	release := func(maybeLocked bool) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clientGrace)
		defer cancel()
		var err error
		if maybeLocked {
			_, err = conn.Exec(cctx, `SELECT pg_advisory_unlock($1)`, e.lockKey())
		}
		if err == nil {
			err = conn.PgConn().Exec(cctx, "RESET lock_timeout; RESET statement_timeout").Close()
		}
		if err != nil || conn.PgConn().TxStatus() != 'I' {
			_ = pc.Hijack().Close(cctx)
			return
		}
		pc.Release()
	}
	settings := fmt.Sprintf("SET lock_timeout = %d; SET statement_timeout = %d", e.cfg.lockTimeout.Milliseconds(), e.cfg.statementTimeout.Milliseconds())
	if err := e.exec(ctx, conn, settings); err != nil {
		release(false)
		return nil, nil, fmt.Errorf("setting lock_timeout and statement_timeout: %w", err)
	}
	return conn, release, nil
}

// session takes a connection (see conn) for the whole run and the table's
// session-level advisory lock on it. DETACH CONCURRENTLY must run outside a
// transaction block, so the lock cannot be a transaction lock. release gives
// the lock and the settings back, or discards the connection.
func (e *Engine) session(ctx context.Context) (*pgx.Conn, func(), error) {
	conn, put, err := e.conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Try-lock in a loop rather than pg_advisory_lock, which would be cut
	// short by the lock_timeout; waiting for another maintainer is expected
	// and bounded separately (WithAdvisoryLockWait).
	deadline := time.Now().Add(e.cfg.advisoryLockWait)
	for attempt := 1; ; attempt++ {
		locked := false
		qctx, cancel := e.bounded(ctx)
		err := conn.QueryRow(qctx, `SELECT pg_try_advisory_lock($1)`, e.lockKey()).Scan(&locked)
		cancel()
		if err != nil {
			// The answer may be lost after the server took the lock.
			put(true)
			return nil, nil, fmt.Errorf("taking the table's advisory lock: %w", err)
		}
		if locked {
			return conn, func() { put(true) }, nil
		}
		if !time.Now().Before(deadline) {
			put(false)
			return nil, nil, &LockError{Op: "waiting for another maintainer of " + e.table.String(), Attempts: attempt, Err: errors.New("advisory lock held")}
		}
		select {
		case <-ctx.Done():
			put(false)
			return nil, nil, fmt.Errorf("waiting for the table's advisory lock: %w", ctx.Err())
		case <-time.After(min(50*time.Millisecond, time.Until(deadline)+time.Millisecond)):
		}
	}
}

// bounded limits ctx to one statement: statement_timeout plus a grace for
// the server's answer. Every database call of the engine runs under it.
func (e *Engine) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.cfg.statementTimeout+clientGrace)
}

// exec runs sql (simple protocol) under a statement deadline.
func (e *Engine) exec(ctx context.Context, conn *pgx.Conn, sql string) error {
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	return conn.PgConn().Exec(ctx, sql).Close()
}

// lockKey is the advisory lock key of the table: a hash of its qualified
// name, the same in every process.
func (e *Engine) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("idempotency.dev/dedup\x00" + e.table.Schema + "\x00" + e.table.Name))
	return int64(h.Sum64())
}

// ddl runs one DDL string (simple protocol, so several statements form one
// implicit transaction) and retries it with backoff while it fails on
// lock_timeout. Other errors are returned at once.
func (e *Engine) ddl(ctx context.Context, conn *pgx.Conn, op, sql string) error {
	for attempt := 1; ; attempt++ {
		err := e.exec(ctx, conn, sql)
		if err == nil {
			return nil
		}
		if !isLockTimeout(err) {
			return fmt.Errorf("%s: %w", op, err)
		}
		if attempt >= e.cfg.attempts {
			return &LockError{Op: op, Attempts: attempt, Err: err}
		}
		if err := e.sleep(ctx, attempt); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
}

// sleep waits before attempt+1: exponential backoff with jitter, so two
// maintainers of different tables behind the same lock do not retry in step.
func (e *Engine) sleep(ctx context.Context, attempt int) error {
	d := e.cfg.backoff << min(attempt-1, 20)
	if d > e.cfg.maxBackoff || d <= 0 {
		d = e.cfg.maxBackoff
	}
	if d > 0 {
		d = d/2 + rand.N(d/2+1)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// lockErr wraps err as "op: err", as a retryable *LockError if it is a lock
// timeout.
func lockErr(op string, err error) error {
	if isLockTimeout(err) {
		return &LockError{Op: op, Attempts: 1, Err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isLockTimeout reports the errors a busy lock produces: lock_not_available
// (lock_timeout) and deadlock_detected.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
}
