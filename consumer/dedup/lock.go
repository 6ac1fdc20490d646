package dedup

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The maintainers of a table serialise on a session advisory lock (session.go).
// Its key used to be a hash of the table's name, which any role that can
// connect can compute and hold, blocking every maintainer of the table
// forever. The key is now random, kept in a one-row table <table>_lock that
// only its owner (the role the engine runs as) may read: the key is unknown
// to anyone who could not maintain the table anyway.
//
// The lock table is made by the first session that needs the key, in the
// table's schema, before the lock is taken; two maintainers that race to make
// it read the same row. The legacy hash is the fallback only where no lock
// table can be made: the schema does not exist yet (a first EnsureTable,
// which creates it), or the role may not create in it (a table adopted in a
// schema of another role's); it is never taken otherwise, so a squatter on it
// blocks nothing.

// The key is also visible, while a maintainer holds the lock, to every role
// that can read pg_locks (classid and objid of the advisory lock), which is
// every role. So each maintainer draws a new key before it lets the lock go
// (rotateLockKey): a key read from pg_locks is stale by the time it is
// free, and holding it blocks nobody.

// lockSuffix names the lock table after the dedup table.
const lockSuffix = "_lock"

// lockVersion is the version in the lock table's marker.
const lockVersion = 1

// lockMarker is the lock table's COMMENT: which dedup table it serves.
type lockMarker struct {
	LockOf  string `json:"lockOf"`
	Version int    `json:"version"`
}

// LockTableName returns the name of the table that holds t's maintenance
// lock key (in t's schema): t's name with the suffix "_lock". Its owner, the
// role the operator runs as, reads the key with SELECT key FROM it.
func LockTableName(t Table) string { return t.WithDefaults().Name + lockSuffix }

func (e *Engine) lockName() string { return LockTableName(e.table) }

func (e *Engine) lockIdent() string {
	return pgx.Identifier{e.table.Schema, e.lockName()}.Sanitize()
}

// legacyLockKey is the key of versions before the lock table: a hash of the
// table's qualified name, the same in every process, and computable by
// anyone.
func (e *Engine) legacyLockKey() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("idempotency.dev/dedup\x00" + e.table.Schema + "\x00" + e.table.Name))
	return int64(h.Sum64()) //nolint:gosec // G115: the hash's 64 bits reinterpreted as a bigint lock key; wrapping is intended
}

// lockKey returns the table's advisory lock key: read from the lock table,
// which it makes if missing (see above). A relation of that name that is not
// ours is a *NameConflictError.
func (e *Engine) lockKey(ctx context.Context, conn *pgx.Conn) (int64, error) {
	for attempt := 0; ; attempt++ {
		key, found, err := e.readLockKey(ctx, conn)
		if err != nil || found {
			return key, err
		}
		made, err := e.makeLockTable(ctx, conn)
		switch {
		case err != nil && (isNameTaken(err) || isUniqueViolation(err)) && attempt == 0:
			continue // another maintainer made it at the same instant: read theirs
		case err != nil:
			return 0, fmt.Errorf("making the lock table %s.%s: %w", e.table.Schema, e.lockName(), err)
		case !made:
			return e.legacyLockKey(), nil
		}
	}
}

// lockKeyAgain is lockKey once the lock on key is held: the lock table was
// checked (owner, marker, privileges) before the lock was taken, and only
// its owner can have replaced it since, so the key is read again with one
// statement. The legacy key, and a lock table gone meanwhile, take
// lockKey's whole path.
func (e *Engine) lockKeyAgain(ctx context.Context, conn *pgx.Conn, key int64) (int64, error) {
	if key == e.legacyLockKey() {
		return e.lockKey(ctx, conn)
	}
	var now int64
	qctx, cancel := e.bounded(ctx)
	err := conn.QueryRow(qctx, "SELECT key FROM "+e.lockIdent()).Scan(&now)
	cancel()
	var pgErr *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return e.lockKey(ctx, conn)
	}
	if err != nil {
		return 0, fmt.Errorf("reading the lock key from %s: %w", e.lockName(), err)
	}
	return now, nil
}

// readLockKey reads the key; found is false when there is no lock table (or
// no row in it yet). A lock table that another role owns, or whose marker
// does not name this table, is a *NameConflictError; privileges on it of
// anyone but its owner (default privileges at its creation) are taken back
// first.
func (e *Engine) readLockKey(ctx context.Context, conn *pgx.Conn) (key int64, found bool, err error) {
	var (
		exists, ours bool
		comment      *string
		others       []string
	)
	qctx, cancel := e.bounded(ctx)
	err = conn.QueryRow(qctx, `
SELECT true, pg_catalog.pg_has_role(c.relowner, 'MEMBER'), pg_catalog.obj_description(c.oid, 'pg_class'),
       ARRAY(SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
               FROM pg_catalog.aclexplode(c.relacl) a WHERE a.grantee OPERATOR(pg_catalog.<>) c.relowner)
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
 WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.name
   AND c.relkind OPERATOR(pg_catalog.=) 'r'::pg_catalog."char"`, e.table.Schema, e.lockName()).Scan(&exists, &ours, &comment, &others)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		kind, of, err := e.nameTaken(ctx, conn, e.lockName())
		if err != nil || kind == "" {
			return 0, false, err
		}
		return 0, false, &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + e.lockName(), Kind: kind, Of: of, Need: "the table that keeps the maintenance lock's key"}
	}
	if err != nil {
		return 0, false, fmt.Errorf("looking up the lock table %s: %w", e.lockName(), err)
	}
	var m lockMarker
	if !ours || comment == nil || json.Unmarshal([]byte(*comment), &m) != nil || m.LockOf != e.table.String() {
		return 0, false, &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + e.lockName(), Kind: "table", Need: "the table that keeps the maintenance lock's key"}
	}
	if len(others) > 0 {
		sql := "REVOKE ALL ON TABLE " + e.lockIdent() + " FROM " + strings.Join(others, ", ")
		if err := e.ddl(ctx, conn, "taking back privileges on "+e.lockName(), sql); err != nil {
			return 0, false, err
		}
	}
	qctx, cancel = e.bounded(ctx)
	defer cancel()
	err = conn.QueryRow(qctx, "SELECT key FROM "+e.lockIdent()).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the lock key from %s: %w", e.lockName(), err)
	}
	return key, true, nil
}

// makeLockTable makes the lock table if missing and stores a random key in it
// unless it has one. made is false, with no error, when the schema does not
// exist or the role may not create in it: the caller falls back to the
// legacy key.
func (e *Engine) makeLockTable(ctx context.Context, conn *pgx.Conn) (made bool, err error) {
	var schema, create bool
	qctx, cancel := e.bounded(ctx)
	err = conn.QueryRow(qctx, `
SELECT true, pg_catalog.has_schema_privilege(n.oid, 'CREATE')
  FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name`, e.table.Schema).Scan(&schema, &create)
	cancel()
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("looking up schema %s: %w", e.table.Schema, err)
	}
	if !schema || !create {
		return false, nil
	}
	marker, err := jsonLiteral(lockMarker{LockOf: e.table.String(), Version: lockVersion})
	if err != nil {
		return false, err
	}
	// One string, one implicit transaction: never a lock table without its
	// marker or with a privilege for anyone else. No PUBLIC privilege is
	// there by default; default privileges (ALTER DEFAULT PRIVILEGES) may
	// add some, which readLockKey takes back.
	sql := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	one boolean NOT NULL DEFAULT true,
	key bigint NOT NULL,
	CONSTRAINT %s PRIMARY KEY (one),
	CONSTRAINT %s CHECK (one)
);
COMMENT ON TABLE %s IS %s;
REVOKE ALL ON TABLE %s FROM PUBLIC`, e.lockIdent(), pgx.Identifier{e.lockName() + "_pk"}.Sanitize(), pgx.Identifier{e.lockName() + "_one"}.Sanitize(),
		e.lockIdent(), marker, e.lockIdent())
	if err := e.ddl(ctx, conn, "creating lock table "+e.lockName(), sql); err != nil {
		return false, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return false, fmt.Errorf("drawing a lock key: %w", err)
	}
	qctx, cancel = e.bounded(ctx)
	defer cancel()
	if _, err := conn.Exec(qctx, "INSERT INTO "+e.lockIdent()+" (key) VALUES ($1) ON CONFLICT DO NOTHING", int64(binary.BigEndian.Uint64(b[:]))); err != nil { //nolint:gosec // G115: 64 random bits reinterpreted as a bigint; wrapping is intended
		return false, fmt.Errorf("storing the lock key in %s: %w", e.lockName(), err)
	}
	return true, nil
}

// dropLockTable drops the lock table, the last step of DropTable. A
// maintainer that waits on the old key re-reads it once it holds the lock
// (session), and finds it gone.
func (e *Engine) dropLockTable(ctx context.Context, conn *pgx.Conn) error {
	if _, found, err := e.readLockKey(ctx, conn); err != nil || !found {
		var nc *NameConflictError
		if errors.As(err, &nc) {
			return nil // not ours: left alone
		}
		return err
	}
	return e.ddl(ctx, conn, "dropping lock table "+e.lockName(), "DROP TABLE IF EXISTS "+e.lockIdent())
}

// isUniqueViolation reports SQLSTATE 23505: two sessions that created the
// same table at once collide on the catalog's unique indexes.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// lockHolders names the sessions that hold the advisory lock key, for the
// error of a maintainer that gave up waiting: pid, role and
// application_name, from pg_locks and pg_stat_activity (which show every
// session's role and application to every role).
func (e *Engine) lockHolders(ctx context.Context, conn *pgx.Conn, key int64) string {
	qctx, cancel := e.bounded(ctx)
	defer cancel()
	rows, err := conn.Query(qctx, `
SELECT pg_catalog.format('pid %s (role %s, application %s)', l.pid, coalesce(a.usename::pg_catalog.text, '?'),
                         pg_catalog.quote_literal(coalesce(a.application_name, '')))
  FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
 WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'::pg_catalog.text AND l.granted
   AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND l.classid OPERATOR(pg_catalog.=) $1::pg_catalog.oid AND l.objid OPERATOR(pg_catalog.=) $2::pg_catalog.oid
   AND l.objsubid OPERATOR(pg_catalog.=) 1::pg_catalog.int2
 ORDER BY l.pid`, uint32(uint64(key)>>32), uint32(uint64(key))) //nolint:gosec // G115: the key's two halves, as pg_locks shows them
	var holders []string
	if err == nil {
		holders, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	switch {
	case err != nil:
		return "held by another session (who could not be read: " + err.Error() + ")"
	case len(holders) == 0:
		return "held by another session (gone since)"
	}
	return "held by " + strings.Join(holders, ", ")
}

// rotateLockKey replaces the lock table's key with a new random one while
// the session still holds the lock on key, before it gives the lock back:
// the key that was visible in pg_locks meanwhile is then worthless to a
// squatter. The UPDATE commits before the unlock, so a maintainer waiting
// for key reads the new key once it gets the old lock (lockKeyAgain) and
// moves to it. The legacy key (no lock table) is not rotated. A failure is
// not fatal: the key stays as it was.
func (e *Engine) rotateLockKey(ctx context.Context, conn *pgx.Conn, key int64) {
	if key == e.legacyLockKey() {
		return
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return
	}
	next := int64(binary.BigEndian.Uint64(b[:])) //nolint:gosec // G115: 64 random bits as a bigint lock key
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.statementTimeout+clientGrace)
	defer cancel()
	_, _ = conn.Exec(qctx, "UPDATE "+e.lockIdent()+" SET key = $1 WHERE key = $2", next, key)
}
