package txpipe

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/jackc/pgx/v5/pgconn"
)

// txGuard is a partition worker's state for the safety nets of its batch
// transactions: how many records one transaction may hold after the server
// ended one for running too long, and whether the batch in hand runs in
// safe mode.
type txGuard struct {
	// limit is the number of records per transaction; 0 means the whole
	// batch. A server-side timeout halves it; growAfter committed
	// transactions in a row double it again.
	limit  int
	streak int
	// logged is set once the first server-side timeout was logged at warn.
	logged bool
	// safe runs every event's savepoint in a round trip of its own, never
	// pipelined with the handler's first statement, for the rest of the
	// batch: set after a transaction had to be redone because a pipelined
	// statement aborted it before its savepoint existed.
	safe bool
}

// growAfter is the number of transactions committed in a row after which a
// reduced limit doubles. It is large enough that a limit just above what
// the server tolerates costs one failed transaction per growAfter.
const growAfter = 16

// size returns how many of the remaining records the next transaction takes.
func (g *txGuard) size(remaining int) int {
	if g.limit == 0 || g.limit > remaining {
		return remaining
	}
	return g.limit
}

// shrink halves the limit below n, the size of the transaction the server
// ended; false if n was one record already.
func (g *txGuard) shrink(n int) bool {
	if n <= 1 {
		return false
	}
	g.limit, g.streak = n/2, 0
	return true
}

// committed counts a committed transaction and grows the limit back.
func (g *txGuard) committed(batchSize int) {
	if g.limit == 0 {
		return
	}
	if g.streak++; g.streak < growAfter {
		return
	}
	g.limit, g.streak = g.limit*2, 0
	if g.limit >= batchSize {
		g.limit = 0
	}
}

// redoError asks process to give up the transaction and run it again at
// once, in safe mode: the transaction was aborted, or ended, in a way that
// no rollback to one event's savepoint can undo. poison, when set, is an
// event whose handler ended the transaction itself: it is not called again
// but takes the handler_failed policy, with poisonText as its error.
type redoError struct {
	err        error
	poison     *record.Item
	poisonText string
}

func (e *redoError) Error() string { return "transaction to be redone: " + e.err.Error() }
func (e *redoError) Unwrap() error { return e.err }

// retryError asks process to roll the transaction back, pause wait with no
// transaction open, and run it again from the failed event it: the events
// before it commit first, in a transaction of their own (without a pause),
// so that each pause costs them one more run at most, not one per attempt.
type retryError struct {
	it   *record.Item
	wait time.Duration
}

func (e *retryError) Error() string {
	return fmt.Sprintf("handler failed (attempt %d); retrying after %v", e.it.Attempts, e.wait)
}

// commitError is a failed COMMIT of the batch transaction.
type commitError struct{ err error }

func (e *commitError) Error() string { return e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// commitRefused returns the server's error if err is a COMMIT that the
// server refused on the data: a deferred constraint (23) or a deferred
// trigger's exception. Not a broken connection, a server shutdown, a
// serialization failure or a timeout (see handlerInfra), and not a FATAL
// error: those are the infrastructure's.
func commitRefused(err error) error {
	var ce *commitError
	if !errors.As(err, &ce) {
		return nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(ce.err, &pgErr) || pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC" || handlerInfra(ce.err) {
		return nil
	}
	return ce.err
}

// isServerTimeout reports whether err is the server ending a transaction
// that ran or idled too long: idle_in_transaction_session_timeout (25P03)
// or, from PostgreSQL 17, transaction_timeout (25P04). The server sends it
// as a FATAL error and closes the connection; pgconn returns it with the
// next statement (often the COMMIT).
func isServerTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "25P03" || pgErr.Code == "25P04")
}

// handlerInfra reports whether a handler's error is a failure of the
// database or of a dependency rather than of the event: the batch is then
// rolled back and retried, and never dead-lettered. A PostgreSQL error in
// the chain decides first. A data exception (22) or an integrity
// violation (23) is the event's fault even if the handler marked it
// Unavailable: retrying the batch would fail on it forever. A broken
// connection (08), insufficient resources (53), an operator intervention
// such as a shutdown (57P), a system error (58), a serialization failure
// (40001), a deadlock (40P01) and a server-side timeout (25P03, 25P04)
// are the infrastructure's, whatever the handler says. Anything else is
// the event's unless marked Unavailable; that includes class 42 (syntax,
// undefined object, privileges), which a handler may mark Unavailable on
// purpose (the SQL sink does: a broken statement pauses the consumer
// instead of dead-lettering every event).
func handlerInfra(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		switch {
		case strings.HasPrefix(c, "22"), strings.HasPrefix(c, "23"):
			return false
		case strings.HasPrefix(c, "08"), strings.HasPrefix(c, "53"), strings.HasPrefix(c, "57P"),
			strings.HasPrefix(c, "58"), c == "40001", c == "40P01", c == "25P03", c == "25P04":
			return true
		}
	}
	return event.IsUnavailable(err)
}

// errAbortedTx stands for the error a handler swallowed.
var errAbortedTx = errors.New("the handler returned nil, but a statement it ran failed and left the transaction aborted")

// errTxEnded is the failure of a handler that ended the batch transaction
// itself (COMMIT or ROLLBACK sent as SQL).
var errTxEnded = errors.New("the handler ended the batch transaction itself (COMMIT or ROLLBACK as SQL); the runtime owns it")

// errResultOpen is the failure of a handler that returned with a query
// result still open (pgx.Rows not closed, a batch not closed), which leaves
// the connection unusable.
var errResultOpen = errors.New("the handler returned with a query result still open (Rows or BatchResults not closed)")

// errConnLost stands for a lost connection the handler did not report.
var errConnLost = errors.New("the database connection was lost during the handler")
