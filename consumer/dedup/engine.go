package dedup

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of the Engine options.
const (
	DefaultLockTimeout      = 500 * time.Millisecond
	DefaultAttempts         = 5
	DefaultBackoff          = 100 * time.Millisecond
	DefaultMaxBackoff       = 2 * time.Second
	DefaultAdvisoryLockWait = 30 * time.Second
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
)

// StepHook is called after each maintenance step with the partition's name.
// An error aborts the run with that error, as a crash at that point would:
// tests use it to interrupt maintenance between steps.
type StepHook func(ctx context.Context, step Step, partition string) error

// Option configures an Engine.
type Option func(*engineConfig)

type engineConfig struct {
	lockTimeout      time.Duration
	attempts         int
	backoff          time.Duration
	maxBackoff       time.Duration
	advisoryLockWait time.Duration
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
	Created []Partition // created (or adopted) and attached
	Dropped []Partition // detached and dropped, including orphans
	// Finalized names partitions whose interrupted detach was completed.
	Finalized []string
	// Window is the dedup window after the run.
	Window Window
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
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.lockTimeout < time.Millisecond || cfg.attempts < 1 || cfg.backoff < 0 || cfg.maxBackoff < cfg.backoff || cfg.advisoryLockWait < 0 {
		return nil, errors.New("creating dedup engine: lock timeout must be >= 1ms, attempts >= 1, 0 <= backoff <= max backoff, advisory lock wait >= 0")
	}
	return &Engine{pool: pool, table: t, cfg: cfg}, nil
}

// Table returns the engine's table, with defaults applied.
func (e *Engine) Table() Table { return e.table }

var errNotImplemented = errors.New("not implemented yet")

// EnsureTable creates the schema (if missing), the partitioned table and its
// ownership marker for owner, or checks an existing table: it must carry
// owner's marker (else *OwnershipError) and the requested layout (else
// *LayoutError). It creates no partitions; Maintain does.
func (e *Engine) EnsureTable(ctx context.Context, owner string) error { return errNotImplemented }

// Observe reads the table's state from pg_catalog. A missing table is a
// State with Exists false, not an error.
func (e *Engine) Observe(ctx context.Context) (State, error) { return State{}, errNotImplemented }

// Maintain brings the partitions in line with PlanPartitions(now, premake,
// retention): completes interrupted detaches, adopts or drops orphans,
// creates missing partitions (current and future first) and drops expired
// ones, without blocking inserts. It stops at the first step that fails; a
// *LockError (IsRetryable) means a lock stayed busy: run it again later.
func (e *Engine) Maintain(ctx context.Context, now time.Time, premake int, retention time.Duration) (Result, error) {
	return Result{}, errNotImplemented
}

// DropTable drops the table and its partitions if its marker names owner;
// *OwnershipError otherwise. A missing table is not an error.
func (e *Engine) DropTable(ctx context.Context, owner string) error { return errNotImplemented }
