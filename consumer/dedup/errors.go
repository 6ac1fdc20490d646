package dedup

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ErrTableNotFound is returned when the dedup table does not exist.
var ErrTableNotFound = errors.New("dedup table not found")

// ErrLockNotAvailable marks a failure to get a lock within the lock_timeout
// after the configured retries, or to get the per-table advisory lock in
// time. Maintenance backed off rather than queue ahead of consumer inserts;
// run it again later. IsRetryable reports it.
var ErrLockNotAvailable = errors.New("lock not available")

// OwnershipError reports a table that exists but is not ours: it carries no
// ownership marker (Owner == "") or another owner's.
type OwnershipError struct {
	Table string // schema-qualified
	Owner string // the owner found on the table; "" when unmarked
}

// Error names the table and the owner found on it.
func (e *OwnershipError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("table %s exists without an ownership marker; refusing to manage a table this operator did not create", e.Table)
	}
	return fmt.Sprintf("table %s is owned by %q; refusing to manage another owner's table", e.Table, e.Owner)
}

// LayoutError reports an existing table whose layout differs from the one
// requested: columns, partitioning, primary key (scope) or interval.
type LayoutError struct {
	Table    string   // schema-qualified
	Problems []string // one line per difference
}

// Error lists the differences.
func (e *LayoutError) Error() string {
	return fmt.Sprintf("table %s does not have the expected layout: %s", e.Table, strings.Join(e.Problems, "; "))
}

// LockError is a DDL statement (or the advisory lock) that could not get its
// lock within lock_timeout, Attempts times in a row. It matches
// ErrLockNotAvailable with errors.Is.
type LockError struct {
	Op       string // what was attempted, e.g. "attaching partition x"
	Attempts int
	Err      error // the last error
}

// Error names the operation, the attempts and the last error.
func (e *LockError) Error() string {
	return fmt.Sprintf("%s: lock not available after %d attempts: %v", e.Op, e.Attempts, e.Err)
}

// Unwrap returns the last error.
func (e *LockError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLockNotAvailable) true.
func (e *LockError) Is(target error) bool { return target == ErrLockNotAvailable }

// IsRetryable reports whether err is a transient failure that the next run
// of the same operation is expected to overcome (a lock that was busy).
func IsRetryable(err error) bool { return errors.Is(err, ErrLockNotAvailable) }

// OutsideWindowError reports an event id that no partition covers: it is
// older than the oldest or newer than the newest partition (or falls in a
// hole left by a foreign partition), so it cannot be deduplicated.
type OutsideWindowError struct {
	ID     uuid.UUID
	Window Window
}

// Error names the id, its timestamp and the window.
func (e *OutsideWindowError) Error() string {
	return fmt.Sprintf("event id %s (time %s) is outside the dedup window %s", e.ID, EventTime(e.ID).Format(time.RFC3339Nano), e.Window)
}
