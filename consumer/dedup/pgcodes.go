package dedup

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// isNameTaken reports SQLSTATE 42P07 (duplicate_table: a relation of that
// name exists) and 42710 (duplicate_object: e.g. a type of that name).
func isNameTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "42710")
}

// isLockTimeout reports the errors a busy lock produces: lock_not_available
// (lock_timeout) and deadlock_detected.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
}

// IsLockTimeout reports whether err is PostgreSQL giving up on a lock: the
// statement's lock_timeout expired (55P03) or it was chosen as a deadlock
// victim (40P01). Either leaves the transaction aborted, and retrying it
// later can succeed.
func IsLockTimeout(err error) bool { return isLockTimeout(err) }
