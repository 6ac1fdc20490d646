package dedup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
