package dedup

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// clientGrace is how much longer than statement_timeout the client waits
// for an answer before it gives up on the connection: the server normally
// cancels the statement first and the connection stays usable; the client
// deadline is the backstop for a server or network that does not answer.
const clientGrace = 5 * time.Second

// conn takes a pool connection with the engine's search_path, lock_timeout
// and statement_timeout set. release(maybeLocked) resets them and returns the
// connection, or closes it when its state is unknown: after an error, in a
// transaction, or when it may hold the table's advisory lock that could not
// be released. Closing ends the backend, and so frees whatever it held.
func (e *Engine) conn(ctx context.Context) (*pgx.Conn, func(maybeLocked bool), error) {
	conn, _, release, err := e.connLocking(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn, func(bool) { release(nil) }, nil
}

// connLocking is conn whose release takes the advisory lock key the
// connection may hold (nil: none). pid is the server's backend for the
// connection (pg_backend_pid(), asked with the settings: see checkSession).
// Setting up and giving back cost a round trip each.
func (e *Engine) connLocking(ctx context.Context) (*pgx.Conn, uint32, func(maybeLocked *int64), error) {
	actx, cancel := e.bounded(ctx)
	pc, err := e.pool.Acquire(actx)
	cancel()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("acquiring connection: %w", err)
	}
	conn := pc.Conn()
	release := func(maybeLocked *int64) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clientGrace)
		defer cancel()
		sql := "RESET lock_timeout; RESET statement_timeout; RESET search_path"
		if maybeLocked != nil {
			// A session lock is released at once, also inside the
			// simple query's implicit transaction.
			sql = fmt.Sprintf("SELECT pg_catalog.pg_advisory_unlock(%d); ", *maybeLocked) + sql
		}
		err := conn.PgConn().Exec(cctx, sql).Close()
		if err != nil || conn.PgConn().TxStatus() != 'I' {
			_ = pc.Hijack().Close(cctx)
			return
		}
		pc.Release()
	}
	// search_path: the engine runs as the table's owner, and a function or
	// operator that another role planted in a schema on the default path
	// ("$user", public) could be picked over pg_catalog's by overload
	// resolution and run with the owner's rights. Every name the engine
	// sends is qualified too (pg_catalog.x, schema.table); the pinned path
	// is the second wall. The engine needs a session of its own anyway (a
	// session advisory lock, DETACH CONCURRENTLY), so a session SET holds.
	settings := fmt.Sprintf("SET search_path = pg_catalog, pg_temp; SET lock_timeout = %d; SET statement_timeout = %d; SELECT pg_catalog.pg_backend_pid()", e.cfg.lockTimeout.Milliseconds(), e.cfg.statementTimeout.Milliseconds())
	pid, err := e.queryPID(ctx, conn.PgConn(), settings)
	if err != nil {
		release(nil)
		return nil, 0, nil, fmt.Errorf("setting search_path, lock_timeout and statement_timeout: %w", err)
	}
	return conn, pid, release, nil
}

// session takes a connection (see conn) for the whole run and the table's
// session-level advisory lock on it. DETACH CONCURRENTLY must run outside a
// transaction block, so the lock cannot be a transaction lock. Its key is
// the table's own (lock.go), unknown to roles that may not maintain the
// table. release gives the lock and the settings back, or discards the
// connection.
func (e *Engine) session(ctx context.Context) (*pgx.Conn, func(), error) {
	conn, pid, put, err := e.connLocking(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := e.checkSession(ctx, conn, pid); err != nil {
		put(nil)
		return nil, nil, err
	}
	// Try-lock in a loop rather than pg_advisory_lock, which would be cut
	// short by the lock_timeout; waiting for another maintainer is expected
	// and bounded separately (WithAdvisoryLockWait).
	deadline := time.Now().Add(e.cfg.advisoryLockWait)
	key, err := e.lockKey(ctx, conn)
	if err != nil {
		put(nil)
		return nil, nil, fmt.Errorf("reading the table's lock key: %w", err)
	}
	for attempt := 1; ; attempt++ {
		locked := false
		qctx, cancel := e.bounded(ctx)
		err := conn.QueryRow(qctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, key).Scan(&locked)
		cancel()
		if err != nil {
			// The answer may be lost after the server took the lock.
			put(&key)
			return nil, nil, fmt.Errorf("taking the table's advisory lock: %w", err)
		}
		if locked {
			// The key may have changed while this waited: a DropTable
			// drops the lock table, a later maintainer makes a new one.
			now, err := e.lockKeyAgain(ctx, conn, key)
			if err != nil {
				put(&key)
				return nil, nil, fmt.Errorf("reading the table's lock key: %w", err)
			}
			if now == key {
				return conn, func() { e.rotateLockKey(ctx, conn, key); put(&key) }, nil
			}
			qctx, cancel := e.bounded(ctx)
			_, err = conn.Exec(qctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
			cancel()
			if err != nil {
				put(&key)
				return nil, nil, fmt.Errorf("giving back the table's old advisory lock: %w", err)
			}
			key = now
			continue
		}
		if !time.Now().Before(deadline) {
			who := e.lockHolders(ctx, conn, key)
			put(nil)
			return nil, nil, &LockError{Op: "waiting for another maintainer of " + e.table.String(), Attempts: attempt, Err: errors.New("advisory lock " + who)}
		}
		select {
		case <-ctx.Done():
			put(nil)
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

// ddl runs one DDL string (simple protocol, so several statements form one
// implicit transaction) and retries it with backoff while it fails on
// lock_timeout. Other errors are returned at once.
func (e *Engine) ddl(ctx context.Context, conn *pgx.Conn, op, sql string) error {
	return e.retryOnLock(ctx, func() error { return statementErr(op, e.exec(ctx, conn, sql)) })
}

// lockBusy is an attempt's statement that failed on a busy lock (see
// isLockTimeout): retryOnLock tries again. It never leaves retryOnLock.
type lockBusy struct {
	op  string
	err error
}

func (b *lockBusy) Error() string { return b.op + ": " + b.err.Error() }

// statementErr is what an attempt of retryOnLock returns for the outcome of
// its statement op: nil, a *lockBusy to retry, or "op: err".
func statementErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case isLockTimeout(err):
		return &lockBusy{op: op, err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// retryOnLock runs attempt until it returns anything but a *lockBusy (see
// statementErr), backing off between attempts (sleep). After e.cfg.attempts
// busy locks in a row the last is returned as a *LockError. Each attempt
// starts from scratch (re-reads what it needs), so a retry does what is
// still due.
func (e *Engine) retryOnLock(ctx context.Context, attempt func() error) error {
	for n := 1; ; n++ {
		err := attempt()
		var busy *lockBusy
		if !errors.As(err, &busy) {
			return err
		}
		if n >= e.cfg.attempts {
			return &LockError{Op: busy.op, Attempts: n, Err: busy.err}
		}
		if err := e.sleep(ctx, n); err != nil {
			return fmt.Errorf("%s: %w", busy.op, err)
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
		d = d/2 + rand.N(d/2+1) //nolint:gosec // G404: jitter, not a secret
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

// checkSession makes sure conn is a server session of its own for as long
// as the client holds it, as the advisory lock, the SETs above and DETACH
// CONCURRENTLY need. Directly connected, the backend's pid (asked with the
// session's settings) is the one the server announced at start-up
// (BackendKeyData): nothing more to ask. A proxy such as
// PgBouncer announces a key of its own; then a second connection opens a
// transaction and both ask for their backend: a pooler in transaction mode
// has handed conn's server connection to the other client (PgBouncer reuses
// the most recently released one first), or gives conn another one, and
// the answer is a *TransactionPoolerError; in session mode conn keeps its
// own. Simple protocol throughout: a transaction pooler keeps no prepared
// statement.
func (e *Engine) checkSession(ctx context.Context, conn *pgx.Conn, pid uint32) error {
	if pid == conn.PgConn().PID() {
		return nil
	}
	bctx, cancel := e.bounded(ctx)
	defer cancel()
	probe, err := pgconn.ConnectConfig(bctx, conn.Config().Config.Copy())
	if err != nil {
		return fmt.Errorf("opening a second connection to check that the pooler between this client and PostgreSQL keeps a session: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clientGrace)
		defer cancel()
		_ = probe.Close(cctx)
	}()
	if err := probe.Exec(bctx, "BEGIN").Close(); err != nil {
		return fmt.Errorf("checking the pooler: %w", err)
	}
	other, err := e.backendPID(ctx, probe)
	if err != nil {
		return fmt.Errorf("checking the pooler: %w", err)
	}
	again, err := e.backendPID(ctx, conn.PgConn())
	if err != nil {
		return fmt.Errorf("checking the pooler: %w", err)
	}
	if other == pid || again != pid {
		return &TransactionPoolerError{Table: e.table.String()}
	}
	return nil
}

// backendPID is pg_backend_pid() of the server session that answers on c.
func (e *Engine) backendPID(ctx context.Context, c *pgconn.PgConn) (uint32, error) {
	return e.queryPID(ctx, c, "SELECT pg_catalog.pg_backend_pid()")
}

// queryPID runs sql (simple protocol; its last statement selects
// pg_backend_pid()) and returns that value.
func (e *Engine) queryPID(ctx context.Context, c *pgconn.PgConn, sql string) (uint32, error) {
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	res, err := c.Exec(ctx, sql).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(res) == 0 || len(res[len(res)-1].Rows) != 1 || len(res[len(res)-1].Rows[0]) != 1 {
		return 0, errors.New("pg_backend_pid() returned no single value")
	}
	v := res[len(res)-1].Rows[0][0]
	pid, err := strconv.ParseUint(string(v), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("pg_backend_pid() returned %q: %w", v, err)
	}
	return uint32(pid), nil
}
