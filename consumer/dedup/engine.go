package dedup

import (
	"context"
	"errors"
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
	noFirst          bool      // WithoutFirstPartitions
	kind             string    // kind.go
	dropGuard        DropGuard // kind.go
	// layout replaces layoutSteps (layout.go), for tests of a migration
	// beyond the current version; nil means layoutSteps.
	layout []layoutStep
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

// WithoutFirstPartitions makes EnsureTable create a new table without its
// first partitions: for a caller that runs Maintain at once with its own
// clock and policy (the operator, which plans ahead of now by its lead and
// premakes what the object's spec says; tests with a clock of their own).
func WithoutFirstPartitions() Option { return func(c *engineConfig) { c.noFirst = true } }

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

func (e *Engine) parent() string { return pgx.Identifier{e.table.Schema, e.table.Name}.Sanitize() }

func (e *Engine) step(ctx context.Context, s Step, partition string) error {
	if e.cfg.hook == nil {
		return nil
	}
	return e.cfg.hook(ctx, s, partition)
}
