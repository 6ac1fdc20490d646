package dedup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestClassify: every SQLSTATE the operator and the consumer runtime tell
// apart has its Kind, found through wrapping; errors without a PostgreSQL
// error are KindNone, a *LockError is KindLockTimeout.
func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("doing x: %w", &pgconn.PgError{Code: code}) }
	cases := []struct {
		err  error
		want Kind
	}{
		{nil, KindNone},
		{io.EOF, KindNone},
		{context.DeadlineExceeded, KindNone},
		{errors.New("plain"), KindNone},
		{pg("28P01"), KindAuth},
		{pg("28000"), KindAuth},
		{pg("3D000"), KindNoDatabase},
		{pg("42501"), KindPermission},
		{pg("08006"), KindConnection},
		{pg("08P01"), KindConnection},
		{pg("57P01"), KindShutdown},
		{pg("57P03"), KindShutdown},
		{pg("57P05"), KindShutdown},
		{pg("57014"), KindOther}, // query_canceled is not a shutdown
		{pg("53300"), KindTooManyConnections},
		{pg("53100"), KindResources},
		{pg("53200"), KindResources},
		{pg("55P03"), KindLockTimeout},
		{pg("40P01"), KindDeadlock},
		{pg("40001"), KindSerialization},
		{pg("25P03"), KindServerTimeout},
		{pg("25P04"), KindServerTimeout},
		{pg("22P02"), KindData},
		{pg("23505"), KindIntegrity},
		{pg("58030"), KindSystem},
		{pg("42P07"), KindNameTaken},
		{pg("42710"), KindNameTaken},
		{pg("42601"), KindOther},
		{pg("XX000"), KindOther},
		{&LockError{Op: "attaching", Attempts: 5, Err: &pgconn.PgError{Code: "55P03"}}, KindLockTimeout},
		{&LockError{Op: "waiting", Attempts: 3, Err: errors.New("advisory lock held")}, KindLockTimeout},
		{fmt.Errorf("maintaining: %w", &LockError{Op: "detaching", Attempts: 5, Err: &pgconn.PgError{Code: "40P01"}}), KindLockTimeout},
	}
	for _, c := range cases {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	// The retry loops' test stays on SQLSTATE: an advisory-lock *LockError
	// carries no PostgreSQL error and is not a statement to retry.
	if isLockTimeout(&LockError{Err: errors.New("advisory lock held")}) {
		t.Error("isLockTimeout(advisory *LockError) = true, want false")
	}
	if !isLockTimeout(pg("40P01")) || !isLockTimeout(pg("55P03")) || isLockTimeout(pg("40001")) {
		t.Error("isLockTimeout: want true for 55P03 and 40P01 only")
	}
	for k := KindNone; k <= KindOther; k++ {
		if s := k.String(); s == "" || s == "Kind(?)" {
			t.Errorf("Kind %d has no name", int(k))
		}
	}
}
