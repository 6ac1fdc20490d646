package dedup

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TestWindowRefreshBoundedByLockTimeout: reading the window takes ACCESS
// SHARE on every attached partition, so a session holding ACCESS EXCLUSIVE
// on one of them (a VACUUM FULL, a plain DETACH) would hold up the refresh,
// and with it a batch whose rows go to a different partition. The refresh
// waits at most the refresh lock timeout: a routine refresh keeps the cached
// window, a refresh the batch needs fails with a retryable *LockError, and
// in both cases the caller's transaction stays usable with its own
// lock_timeout.
func TestWindowRefreshBoundedByLockTimeout(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	e := newEngine(t, pool, tbl)
	now := time.Now().UTC()
	res, err := e.Maintain(ctx, now, 1, 3*time.Hour)
	if err != nil || len(res.Created) < 3 {
		t.Fatalf("maintain: created %v, err %v", names(res.Created), err)
	}
	oldest := slices.MinFunc(res.Created, func(a, b Partition) int { return a.From.Compare(b.From) })

	var (
		clockMu sync.Mutex
		clock   = now
	)
	tick := func(d time.Duration) {
		clockMu.Lock()
		clock = clock.Add(d)
		clockMu.Unlock()
	}
	const lockTimeout = 200 * time.Millisecond
	in, err := NewInserter(tbl, "g", WithRefreshLockTimeout(lockTimeout), WithClock(func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		return clock
	}))
	if err != nil {
		t.Fatal(err)
	}
	before := insertCommit(t, pool, in, idAt(now)).Window

	// A partition premade after the window was cached: the next refresh
	// that succeeds shows it.
	if _, err := e.Maintain(ctx, now, 3, 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	// Another session locks the oldest partition, which none of the ids
	// below go to, and keeps the lock until the test releases it.
	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(ctx) }()
	if _, err := locker.Exec(ctx, `LOCK TABLE `+pgx.Identifier{"public", oldest.Name}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	// insertIn runs one Insert in a transaction with no lock_timeout of its
	// own, checks that the transaction is usable afterwards and still has
	// no lock_timeout, commits, and returns how long Insert took.
	insertIn := func(in *Inserter, ids []uuid.UUID) (BatchResult, time.Duration, error) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = 0"); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		r, insErr := in.Insert(ctx, tx, ids)
		took := time.Since(t0)
		var lt string
		if err := tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt); err != nil {
			t.Fatalf("transaction unusable after Insert (err %v): %v", insErr, err)
		}
		if lt != "0" {
			t.Fatalf("Insert left lock_timeout = %s in the caller's transaction, want 0", lt)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return r, took, insErr
	}
	// The wait allowed: the lock timeout plus generous slack for a busy
	// machine, far below the minutes the lock is held.
	const bound = lockTimeout + 3*time.Second

	// A routine refresh (the cache is older than the refresh interval)
	// gives up on the lock and keeps the cached window.
	tick(2 * DefaultRefreshInterval)
	id := idAt(now)
	r, took, err := insertIn(in, []uuid.UUID{id})
	if err != nil {
		t.Fatalf("Insert with a partition locked: %v", err)
	}
	if took > bound {
		t.Fatalf("Insert waited %s behind the lock, want under %s", took, bound)
	}
	if !r.Fresh[0] || r.Outside[0] || r.Window != before {
		t.Fatalf("Fresh %v Outside %v window %s, want fresh, inside the cached window %s", r.Fresh, r.Outside, r.Window, before)
	}

	// An inserter that has no window yet must read it: it fails, within
	// the bound, with an error that says to retry.
	cold, err := NewInserter(tbl, "g", WithRefreshLockTimeout(lockTimeout))
	if err != nil {
		t.Fatal(err)
	}
	_, took, err = insertIn(cold, []uuid.UUID{idAt(now)})
	var le *LockError
	if !errors.As(err, &le) || !IsRetryable(err) {
		t.Fatalf("first Insert with a partition locked: err %v, want a retryable *LockError", err)
	}
	if took > bound {
		t.Fatalf("first Insert waited %s behind the lock, want under %s", took, bound)
	}

	// Once the lock is gone, the next refresh (a second later) reads the
	// window again, with the partition premade meanwhile.
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	tick(2 * missRefreshInterval)
	r, _, err = insertIn(in, []uuid.UUID{idAt(now)})
	if err != nil {
		t.Fatalf("Insert after the lock was released: %v", err)
	}
	if !r.Window.To.After(before.To) {
		t.Fatalf("window %s after the lock was released, want it to reach past %s", r.Window, before.To)
	}
	if r, _, err = insertIn(cold, []uuid.UUID{id}); err != nil || r.Fresh[0] {
		t.Fatalf("retried first Insert: Fresh %v err %v, want the id seen as a duplicate", r.Fresh, err)
	}
}

func TestInserterRejectsTinyRefreshLockTimeout(t *testing.T) {
	if _, err := NewInserter(Table{Interval: Daily}, "g", WithRefreshLockTimeout(0)); err == nil {
		t.Fatal("NewInserter accepted a refresh lock timeout of 0 (which PostgreSQL reads as no timeout)")
	}
}
