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
// ownership marker (Owner == "") or another owner's. From Engine.Adopt it
// also names the previous owner adoption was asked for (AdoptFrom), which
// the marker does not name.
type OwnershipError struct {
	Table string // schema-qualified
	Owner string // the owner found on the table; "" when unmarked
	// AdoptFrom is the previous owner Engine.Adopt was asked to take the
	// table over from; "" from the other calls.
	AdoptFrom string
}

// Error names the table and the owner found on it.
func (e *OwnershipError) Error() string {
	switch {
	case e.Owner == "" && e.AdoptFrom != "":
		return fmt.Sprintf("table %s exists without an ownership marker; refusing to adopt it from %q: only a table whose marker names that owner is adopted", e.Table, e.AdoptFrom)
	case e.Owner == "":
		return fmt.Sprintf("table %s exists without an ownership marker; refusing to manage a table this operator did not create", e.Table)
	case e.AdoptFrom != "":
		return fmt.Sprintf("table %s is owned by %q, not by %q that adoption was asked for; refusing to take over another owner's table", e.Table, e.Owner, e.AdoptFrom)
	}
	return fmt.Sprintf("table %s is owned by %q; refusing to manage another owner's table", e.Table, e.Owner)
}

// LayoutError reports an existing table whose layout differs from the one
// requested: columns, partitioning, primary key (scope) or interval. A
// *NameConflictError (the layout cannot be created because a name it needs
// is taken) unwraps to one.
type LayoutError struct {
	Table    string   // schema-qualified
	Problems []string // one line per difference
}

// Error lists the differences.
func (e *LayoutError) Error() string {
	return fmt.Sprintf("table %s does not have the expected layout: %s", e.Table, strings.Join(e.Problems, "; "))
}

// NameConflictError reports that a name the dedup DDL must create is taken
// by something that is not ours: typically the primary key index
// <table>_pkey left behind by a legacy table that was renamed (ALTER TABLE
// RENAME keeps its indexes' names), or a table of someone else's named like
// one of our partitions. Nothing was created. It unwraps to a *LayoutError,
// so a caller that treats a layout mismatch as needing a person (not a
// retry) treats this the same way.
type NameConflictError struct {
	Table string // the dedup table, schema-qualified
	Name  string // the name that is taken, schema-qualified
	Kind  string // what holds it: "index", "table", "sequence", "view", "type", ...
	Of    string // for an index, the table it belongs to; "" otherwise
	Need  string // what our DDL needs the name for
}

// Error names the taken name, what holds it, and what to do.
func (e *NameConflictError) Error() string {
	holder := e.Kind
	if e.Of != "" {
		holder += " on " + e.Of
	}
	return fmt.Sprintf("dedup table %s: cannot create %s: the name %s is taken by %s %s that is not ours; rename it (ALTER %s %s RENAME TO ...), drop it if it is unused, or choose another table name",
		e.Table, e.Need, e.Name, article(holder), holder, alterKeyword(e.Kind), e.Name)
}

// Unwrap presents the conflict as a layout that cannot be created.
func (e *NameConflictError) Unwrap() error {
	return &LayoutError{Table: e.Table, Problems: []string{fmt.Sprintf("%s is taken by %s %s", e.Name, article(e.Kind), e.Kind)}}
}

func article(s string) string {
	if s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an"
	}
	return "a"
}

// alterKeyword is the ALTER command that renames an object of kind.
func alterKeyword(kind string) string {
	switch kind {
	case "index", "partitioned index":
		return "INDEX"
	case "sequence":
		return "SEQUENCE"
	case "view":
		return "VIEW"
	case "materialized view":
		return "MATERIALIZED VIEW"
	case "foreign table":
		return "FOREIGN TABLE"
	case "type", "composite type":
		return "TYPE"
	case "function":
		return "FUNCTION"
	}
	return "TABLE"
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

// TransactionPoolerError is a maintenance connection that is not a session
// of its own: a pooler in transaction mode (PgBouncer's pool_mode =
// transaction, a CloudNativePG Pooler in that mode) hands the server
// connection to another client after each transaction, so the table's
// session advisory lock, the session's settings and DETACH CONCURRENTLY
// would outlive this client's hold on it. Nothing was changed.
type TransactionPoolerError struct {
	Table string // schema-qualified
}

func (e *TransactionPoolerError) Error() string {
	return fmt.Sprintf("maintaining %s needs a database session of its own (a session advisory lock, DETACH PARTITION CONCURRENTLY), "+
		"but this connection goes through a pooler in transaction mode (PgBouncer pool_mode=transaction, or a CloudNativePG Pooler in that mode), "+
		"which gives the server connection to other clients between transactions; connect the maintainer directly to PostgreSQL "+
		"(or through a pooler in session mode) and only the consumer through the transaction pooler", e.Table)
}
