package dedup

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestAdoptCrashRollsBack interrupts the adoption after the first partition
// marker, after several, and after the table's marker (just before commit):
// each time nothing has changed (one transaction), the new owner is still
// refused, and the next Adopt completes it; maintenance then converges.
func TestAdoptCrashRollsBack(t *testing.T) {
	for _, c := range []struct {
		name  string
		step  Step
		after int // crash at the after-th time the step is reached
	}{
		{"first partition", StepMarkerRewritten, 1},
		{"fifth partition", StepMarkerRewritten, 5},
		{"table marker", StepTableAdopted, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := newPool(t)
			ctx := testCtx(t)
			tbl, rows := oldOwnersTable(t, pool)
			seen := 0
			crashy, err := NewEngine(pool, tbl, WithStepHook(func(_ context.Context, s Step, _ string) error {
				if s == c.step {
					if seen++; seen == c.after {
						return errCrash
					}
				}
				return nil
			}), WithoutFirstPartitions())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := crashy.Adopt(ctx, newOwner, testOwner); !errors.Is(err, errCrash) {
				t.Fatalf("Adopt crashing at %s #%d = %v, want the crash", c.step, c.after, err)
			}
			if seen != c.after {
				t.Fatalf("the step %s was reached %d times, want %d", c.step, seen, c.after)
			}
			assertOwners(t, ownerMarkers(t, pool, "processed_event"), testOwner, 10)
			e, _ := NewEngine(pool, tbl, WithAdvisoryLockWait(0), WithoutFirstPartitions()) // the lock was released
			var oe *OwnershipError
			if err := e.EnsureTable(ctx, newOwner); !errors.As(err, &oe) || oe.Owner != testOwner {
				t.Fatalf("EnsureTable by the new owner after the crash = %v, want refused", err)
			}
			res, err := e.Adopt(ctx, newOwner, testOwner)
			if err != nil || !res.Adopted || len(res.Partitions) != 9 {
				t.Fatalf("Adopt after the crash = %+v, %v; want all 9 partitions adopted", res, err)
			}
			assertOwners(t, ownerMarkers(t, pool, "processed_event"), newOwner, 10)
			if n := countRows(t, pool, "processed_event"); n != rows {
				t.Fatalf("%d rows, want %d", n, rows)
			}
			now := adoptStart.Add(2 * time.Hour)
			if _, err := e.Maintain(ctx, now, adoptPremake, adoptRetention); err != nil {
				t.Fatal(err)
			}
			assertConverged(t, pool, e, now, adoptPremake, adoptRetention)
		})
	}
}

// TestAdopterKilled terminates the adopting backend in the middle of the
// transaction (a real crash): nothing has changed, no advisory lock is left
// behind, and the next Adopt completes. While the adoption's transaction is
// open, holding its locks on the table and the partitions, an insert does
// not wait.
func TestAdopterKilled(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl, rows := oldOwnersTable(t, pool)
	const app = "dedup-test-killed-adopter"
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	apool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apool.Close)

	in, _ := NewInserter(tbl, "g")
	var insertTook time.Duration
	seen := 0
	hook := func(hctx context.Context, s Step, _ string) error {
		if s != StepMarkerRewritten {
			return nil
		}
		if seen++; seen != 3 {
			return nil
		}
		t0 := time.Now()
		ictx, cancel := context.WithTimeout(hctx, 5*time.Second)
		defer cancel()
		tx, err := pool.Begin(ictx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if _, err := in.Insert(ictx, tx, idsAt(adoptStart.Add(30*time.Minute), adoptStart.Add(-time.Hour))); err != nil {
			return err
		}
		if err := tx.Commit(ictx); err != nil {
			return err
		}
		insertTook = time.Since(t0)
		var n int
		return pool.QueryRow(hctx, `SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1`, app).Scan(&n)
	}
	crashy, err := NewEngine(apool, tbl, WithStepHook(hook), WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashy.Adopt(ctx, newOwner, testOwner); err == nil {
		t.Fatal("Adopt survived the termination of its backend")
	}
	if seen != 3 || insertTook == 0 {
		t.Fatalf("the hook ran %d times, insert took %s: the crash did not happen mid-transaction", seen, insertTook)
	}
	if insertTook > 2*time.Second {
		t.Fatalf("an insert took %s while the adoption's transaction was open", insertTook)
	}
	assertOwners(t, ownerMarkers(t, pool, "processed_event"), testOwner, 10)

	// No stale advisory lock in the adopter's pool: a fresh engine gets it at once.
	e, _ := NewEngine(apool, tbl, WithAdvisoryLockWait(0), WithoutFirstPartitions())
	res, err := e.Adopt(ctx, newOwner, testOwner)
	if err != nil || !res.Adopted || len(res.Partitions) != 9 {
		t.Fatalf("Adopt after the crash = %+v, %v", res, err)
	}
	assertOwners(t, ownerMarkers(t, pool, "processed_event"), newOwner, 10)
	if n := countRows(t, pool, "processed_event"); n != rows+2 {
		t.Fatalf("%d rows, want %d", n, rows+2)
	}
	now := adoptStart.Add(2 * time.Hour)
	if _, err := e.Maintain(ctx, now, adoptPremake, adoptRetention); err != nil {
		t.Fatal(err)
	}
	assertConverged(t, pool, e, now, adoptPremake, adoptRetention)
}

// TestAdoptWhenOwned: a table that already names the new owner is left as
// it is, except for partition markers still naming the previous owner (a
// table marker rewritten by hand), which are completed. A missing table is
// created for the new owner.
func TestAdoptWhenOwned(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	e, _ := NewEngine(pool, Table{Interval: Hourly}, WithoutFirstPartitions())
	res, err := e.Adopt(ctx, newOwner, testOwner)
	if err != nil || !res.Created || res.Adopted {
		t.Fatalf("Adopt of a missing table = %+v, %v; want created", res, err)
	}
	if _, err := e.Maintain(ctx, adoptStart, adoptPremake, adoptRetention); err != nil {
		t.Fatal(err)
	}
	before := ownerMarkers(t, pool, "processed_event")
	assertOwners(t, before, newOwner, 8)
	res, err = e.Adopt(ctx, newOwner, testOwner)
	if err != nil || res.Created || res.Adopted || len(res.Partitions) != 0 {
		t.Fatalf("Adopt of an owned table = %+v, %v; want a no-op", res, err)
	}
	if after := ownerMarkers(t, pool, "processed_event"); !maps.Equal(before, after) {
		t.Fatalf("markers changed: %v -> %v", before, after)
	}

	t.Run("partitions left with the previous owner", func(t *testing.T) {
		pool := newPool(t)
		ctx := testCtx(t)
		tbl, _ := oldOwnersTable(t, pool)
		// Someone adopted the table by hand, forgetting the partitions.
		if _, err := pool.Exec(ctx, `COMMENT ON TABLE processed_event IS '{"idempotency.dev/owner":"`+newOwner+`","scope":"ConsumerGroup","interval":"Hourly","version":1}'`); err != nil {
			t.Fatal(err)
		}
		e, _ := NewEngine(pool, tbl, WithoutFirstPartitions())
		res, err := e.Adopt(ctx, newOwner, testOwner)
		if err != nil || res.Adopted || len(res.Partitions) != 9 {
			t.Fatalf("Adopt = %+v, %v; want the 9 partition markers completed", res, err)
		}
		assertOwners(t, ownerMarkers(t, pool, "processed_event"), newOwner, 10)
		now := adoptStart.Add(2 * time.Hour)
		if _, err := e.Maintain(ctx, now, adoptPremake, adoptRetention); err != nil {
			t.Fatal(err)
		}
		assertConverged(t, pool, e, now, adoptPremake, adoptRetention)
	})
}

func idsAt(ts ...time.Time) []uuid.UUID {
	out := make([]uuid.UUID, len(ts))
	for i, tm := range ts {
		out[i] = idAt(tm)
	}
	return out
}

// TestMaintainAfterAdoptionByAnother: an Engine whose EnsureTable passed for
// the old owner, and which would then run Maintain (as an old operator still
// running elsewhere would), is refused once another object has adopted the
// table in between: it neither creates partitions marked for the new owner
// nor drops any under its own retention.
func TestMaintainAfterAdoptionByAnother(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	old := newEngine(t, pool, tbl) // EnsureTable(testOwner) passed
	if _, err := old.Maintain(ctx, adoptStart, adoptPremake, adoptRetention); err != nil {
		t.Fatal(err)
	}
	adopter, err := NewEngine(pool, tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adopter.Adopt(ctx, newOwner, testOwner); err != nil {
		t.Fatal(err)
	}
	before, err := adopter.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A day later: the old engine's plan would create 24 partitions and
	// drop every one that exists.
	res, err := old.Maintain(ctx, adoptStart.Add(24*time.Hour), adoptPremake, adoptRetention)
	var oe *OwnershipError
	if !errors.As(err, &oe) || oe.Owner != newOwner {
		t.Fatalf("Maintain by the old owner's engine after the adoption = %v, want *OwnershipError naming %s", err, newOwner)
	}
	if len(res.Created) != 0 || len(res.Dropped) != 0 {
		t.Fatalf("refused Maintain still created %v and dropped %v", names(res.Created), names(res.Dropped))
	}
	after, err := adopter.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(partitionNames(after.Partitions), partitionNames(before.Partitions)) {
		t.Fatalf("partitions changed from %v to %v", partitionNames(before.Partitions), partitionNames(after.Partitions))
	}
	// The adopter's own engine maintains it.
	if _, err := adopter.Maintain(ctx, adoptStart.Add(time.Hour), adoptPremake, adoptRetention); err != nil {
		t.Fatalf("Maintain by the adopter: %v", err)
	}
}
