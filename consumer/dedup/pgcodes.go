package dedup

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Kind is what a PostgreSQL error means to a caller deciding what to do
// next, as its SQLSTATE says (see Classify). The operator maps a Kind to a
// condition reason; the consumer runtime to "the event's fault" or "the
// infrastructure's".
type Kind int

// The kinds Classify reports.
const (
	// KindNone: no error, or no PostgreSQL error in the chain (a network
	// error before the server answered, a context deadline, a Go error).
	KindNone Kind = iota
	// KindAuth: the server refused the credentials: 28P01
	// (invalid_password) or 28000 (invalid_authorization_specification: no
	// pg_hba.conf entry, unknown role). Retrying unchanged does not help.
	KindAuth
	// KindNoDatabase: the database named in the connection does not exist
	// (3D000, invalid_catalog_name).
	KindNoDatabase
	// KindPermission: the role lacks a privilege (42501,
	// insufficient_privilege).
	KindPermission
	// KindConnection: class 08, connection exception: the connection broke
	// or could not be made.
	KindConnection
	// KindShutdown: class 57P: the server is shutting down or starting
	// (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
	// cannot_connect_now), the database was dropped (57P04) or the session
	// idled out (57P05).
	KindShutdown
	// KindTooManyConnections: 53300 (too_many_connections): the server's
	// or the role's connection limit is reached.
	KindTooManyConnections
	// KindResources: class 53 other than 53300: disk full (53100), out of
	// memory (53200), and the like.
	KindResources
	// KindLockTimeout: 55P03 (lock_not_available): a statement's
	// lock_timeout expired. Also any *LockError (ErrLockNotAvailable):
	// maintenance that backed off after its retries or waited too long for
	// another maintainer's advisory lock.
	KindLockTimeout
	// KindDeadlock: 40P01 (deadlock_detected): the transaction was chosen
	// as a deadlock victim; retrying it can succeed.
	KindDeadlock
	// KindSerialization: 40001 (serialization_failure); retrying the
	// transaction can succeed.
	KindSerialization
	// KindServerTimeout: the server ended a transaction that ran or idled
	// too long: 25P03 (idle_in_transaction_session_timeout) or, from
	// PostgreSQL 17, 25P04 (transaction_timeout). The connection is closed.
	KindServerTimeout
	// KindData: class 22, data exception (a bad value).
	KindData
	// KindIntegrity: class 23, integrity constraint violation.
	KindIntegrity
	// KindSystem: class 58, system error (an I/O error on the server).
	KindSystem
	// KindNameTaken: 42P07 (duplicate_table) or 42710 (duplicate_object):
	// a relation or type of the name to create exists.
	KindNameTaken
	// KindOther: any other PostgreSQL error.
	KindOther
)

var kindNames = [...]string{
	KindNone: "None", KindAuth: "Auth", KindNoDatabase: "NoDatabase", KindPermission: "Permission",
	KindConnection: "Connection", KindShutdown: "Shutdown", KindTooManyConnections: "TooManyConnections",
	KindResources: "Resources", KindLockTimeout: "LockTimeout", KindDeadlock: "Deadlock",
	KindSerialization: "Serialization", KindServerTimeout: "ServerTimeout", KindData: "Data",
	KindIntegrity: "Integrity", KindSystem: "System", KindNameTaken: "NameTaken", KindOther: "Other",
}

// String names the kind, e.g. "LockTimeout".
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "Kind(?)"
	}
	return kindNames[k]
}

// Classify says what err means by the SQLSTATE of the first PostgreSQL
// error in its chain (errors.As), so a caller maps a Kind instead of
// matching codes. A *LockError is KindLockTimeout whatever its last error.
// Errors with no PostgreSQL error in them are KindNone: the caller tells a
// network failure from a Go error itself.
func Classify(err error) Kind {
	if err == nil {
		return KindNone
	}
	if errors.Is(err, ErrLockNotAvailable) {
		return KindLockTimeout
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return KindNone
	}
	return classifyCode(pgErr.Code)
}

// classifyCode maps a SQLSTATE to its Kind.
func classifyCode(code string) Kind {
	switch code {
	case "28P01", "28000":
		return KindAuth
	case "3D000":
		return KindNoDatabase
	case "42501":
		return KindPermission
	case "53300":
		return KindTooManyConnections
	case "55P03":
		return KindLockTimeout
	case "40P01":
		return KindDeadlock
	case "40001":
		return KindSerialization
	case "25P03", "25P04":
		return KindServerTimeout
	case "42P07", "42710":
		return KindNameTaken
	}
	switch {
	case strings.HasPrefix(code, "08"):
		return KindConnection
	case strings.HasPrefix(code, "57P"):
		return KindShutdown
	case strings.HasPrefix(code, "53"):
		return KindResources
	case strings.HasPrefix(code, "22"):
		return KindData
	case strings.HasPrefix(code, "23"):
		return KindIntegrity
	case strings.HasPrefix(code, "58"):
		return KindSystem
	}
	return KindOther
}

// pgKind is the Kind of the first PostgreSQL error in err's chain, by its
// SQLSTATE alone (a *LockError counts by the error it wraps).
func pgKind(err error) Kind {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return KindNone
	}
	return classifyCode(pgErr.Code)
}

// isNameTaken reports SQLSTATE 42P07 (duplicate_table: a relation of that
// name exists) and 42710 (duplicate_object: e.g. a type of that name).
func isNameTaken(err error) bool { return pgKind(err) == KindNameTaken }

// isLockTimeout reports the errors a busy lock produces: lock_not_available
// (lock_timeout) and deadlock_detected.
func isLockTimeout(err error) bool {
	k := pgKind(err)
	return k == KindLockTimeout || k == KindDeadlock
}

// IsLockTimeout reports whether err is PostgreSQL giving up on a lock: the
// statement's lock_timeout expired (55P03) or it was chosen as a deadlock
// victim (40P01). Either leaves the transaction aborted, and retrying it
// later can succeed.
func IsLockTimeout(err error) bool { return isLockTimeout(err) }
