package dedup

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

var errCrash = errors.New("simulated crash")

// crashAt returns a hook that fails the first time step is reached.
func crashAt(step Step) (StepHook, *string) {
	var hit string
	return func(_ context.Context, s Step, partition string) error {
		if s == step && hit == "" {
			hit = partition
			return errCrash
		}
		return nil
	}, &hit
}

// TestCrashAtEveryStepConverges interrupts maintenance after each step of
// the protocol (created-not-attached, attached, detached-not-dropped,
// dropped) and checks that the next run reaches exactly the planned state:
// every wanted partition attached, nothing pending, no leftover tables.
func TestCrashAtEveryStepConverges(t *testing.T) {
	start := time.Date(2024, 12, 31, 22, 0, 0, 0, time.UTC)
	const premake, retention = 2, 4 * time.Hour
	later := start.Add(3 * time.Hour) // drops three, creates three
	for _, step := range []Step{StepCreated, StepAttached, StepDetached, StepDropped} {
		t.Run(string(step), func(t *testing.T) {
			pool := newPool(t)
			ctx := testCtx(t)
			tbl := Table{Interval: Hourly}
			newEngine(t, pool, tbl)
			hook, hit := crashAt(step)
			crashy, err := NewEngine(pool, tbl, WithStepHook(hook), WithoutFirstPartitions())
			if err != nil {
				t.Fatal(err)
			}
			clean, _ := NewEngine(pool, tbl, WithoutFirstPartitions())

			// Build the table first: a table's first partitions are made in
			// one transaction (TestFirstPartitionsInOneTransaction), and
			// drops happen on the second run.
			if _, err := clean.Maintain(ctx, start, premake, retention); err != nil {
				t.Fatal(err)
			}
			now := later
			if _, err := crashy.Maintain(ctx, now, premake, retention); !errors.Is(err, errCrash) {
				t.Fatalf("Maintain with a crash at %s = %v, want the crash", step, err)
			}
			st, err := clean.Observe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch step {
			case StepCreated, StepDetached:
				// The interrupted partition is a standalone table of ours.
				if !slices.Contains(names(st.Orphans), *hit) || slices.Contains(partitionNames(st.Partitions), *hit) {
					t.Fatalf("after a crash at %s of %s: orphans %v, partitions %v", step, *hit, names(st.Orphans), partitionNames(st.Partitions))
				}
			}

			res, err := clean.Maintain(ctx, now, premake, retention)
			if err != nil {
				t.Fatalf("the run after the crash: %v", err)
			}
			if step == StepCreated && !slices.Contains(names(res.Created), *hit) {
				t.Fatalf("standalone %s not adopted: created %v", *hit, names(res.Created))
			}
			if step == StepDetached && !slices.Contains(names(res.Dropped), *hit) {
				t.Fatalf("detached %s not dropped: dropped %v", *hit, names(res.Dropped))
			}
			assertConverged(t, pool, clean, now, premake, retention)
		})
	}
}

// TestPendingDetachIsFinalized leaves a DETACH CONCURRENTLY half done: a
// transaction that has read the table makes its second phase wait, and the
// short lock_timeout cancels it, leaving the partition "detach pending".
// Maintenance reports a retryable error without blocking writers, and once
// the reader is gone the next run completes the detach with FINALIZE and
// drops the table.
func TestPendingDetachIsFinalized(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	e := newEngine(t, pool, tbl, WithLockTimeout(200*time.Millisecond), WithAttempts(2), WithBackoff(20*time.Millisecond, 50*time.Millisecond))
	start := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	const premake, retention = 1, 3 * time.Hour
	if _, err := e.Maintain(ctx, start, premake, retention); err != nil {
		t.Fatal(err)
	}
	in, _ := NewInserter(tbl, "g")
	insertCommit(t, pool, in, idAt(start.Add(-3*time.Hour)), idAt(start))

	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	var n int
	if err := reader.QueryRow(ctx, "SELECT count(*) FROM processed_event").Scan(&n); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	res, err := e.Maintain(ctx, start.Add(time.Hour), premake, retention)
	if !IsRetryable(err) {
		t.Fatalf("Maintain behind a reader = %v, want a retryable lock error", err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Fatalf("Maintain took %s to give up, want bounded retries", took)
	}
	oldest := PartitionName("processed_event", Hourly, start.Add(-3*time.Hour))
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pending := slices.ContainsFunc(st.Partitions, func(p ObservedPartition) bool { return p.Name == oldest && p.DetachPending })
	if !pending {
		t.Fatalf("%s not left pending detach: %+v", oldest, st.Partitions)
	}
	if st.Window.Contains(start.Add(-3*time.Hour)) || res.Window.Contains(start.Add(-3*time.Hour)) {
		t.Fatalf("window %s still covers the pending partition", st.Window)
	}
	// Writers are not blocked meanwhile.
	t1 := time.Now()
	if r := insertCommit(t, pool, in, idAt(start.Add(time.Hour))); !r.Fresh[0] {
		t.Fatalf("insert during the pending detach: %+v", r)
	}
	if d := time.Since(t1); d > 5*time.Second { // blocked, it would wait for the detach: for good
		t.Fatalf("insert during the pending detach took %s", d)
	}

	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = e.Maintain(ctx, start.Add(time.Hour), premake, retention)
	if err != nil {
		t.Fatalf("Maintain after the reader left: %v", err)
	}
	if !slices.Contains(res.Finalized, oldest) || !slices.Contains(names(res.Dropped), oldest) {
		t.Fatalf("finalized %v dropped %v, want %s in both", res.Finalized, names(res.Dropped), oldest)
	}
	assertConverged(t, pool, e, start.Add(time.Hour), premake, retention)
}

// assertConverged checks the table is exactly what the plan wants: the
// planned partitions attached, none pending, no standalone leftovers, and a
// further run with nothing to do.
func assertConverged(t *testing.T, pool *pgxpool.Pool, e *Engine, now time.Time, premake int, retention time.Duration) {
	t.Helper()
	ctx := testCtx(t)
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The planner on an empty table lists every slot the table should have.
	want := names(PlanPartitions(now, e.table.Interval, premake, retention, e.table.Name, nil).Create)
	got := partitionNames(st.Partitions)
	if !slices.Equal(got, want) {
		t.Fatalf("partitions %v, want %v", got, want)
	}
	for _, p := range st.Partitions {
		if p.DetachPending {
			t.Fatalf("%s still pending detach", p.Name)
		}
	}
	if len(st.Orphans) != 0 || len(st.Foreign) != 0 {
		t.Fatalf("orphans %v foreign %v", names(st.Orphans), st.Foreign)
	}
	var standalone int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relkind = 'r' AND NOT relispartition AND relname LIKE $1`,
		e.table.Name+`\_p%`).Scan(&standalone); err != nil || standalone != 0 {
		t.Fatalf("%d standalone partition tables left (err %v)", standalone, err)
	}
	res, err := e.Maintain(ctx, now, premake, retention)
	if err != nil || len(res.Created)+len(res.Dropped)+len(res.Finalized) != 0 {
		t.Fatalf("another run still did %+v (err %v)", res, err)
	}
}

// TestMaintainerKilledDuringDetach kills the maintainer's backend while
// DETACH CONCURRENTLY waits in its second phase (a real crash, not a
// timeout). The partition is left pending; the engine discards the broken
// connection; the next run finalizes and drops it.
//
// The maintainer has a pool of its own with an application_name, so the
// backend terminated is certainly its own: pg_stat_activity lists every
// database of the server (all packages' tests, with TEST_DATABASE_URL).
func TestMaintainerKilledDuringDetach(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	const app = "dedup-test-killed-maintainer"
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	mpool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mpool.Close)
	patient := newEngine(t, mpool, tbl, WithLockTimeout(30*time.Second))
	start := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	const premake, retention = 1, 3 * time.Hour
	if _, err := patient.Maintain(ctx, start, premake, retention); err != nil {
		t.Fatal(err)
	}
	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM processed_event"); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := patient.Maintain(ctx, start.Add(time.Hour), premake, retention)
		done <- err
	}()
	var pid int
	waitFor(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1
			  AND query LIKE 'ALTER TABLE%DETACH PARTITION%CONCURRENTLY' AND wait_event_type = 'Lock'`, app).Scan(&pid)
		return err == nil
	}, "DETACH CONCURRENTLY waiting for the reader")
	// Wait (up to 10s) for the backend to be gone, so nothing it held
	// lingers into the next step.
	var gone bool
	if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&gone); err != nil || !gone {
		t.Fatalf("terminating the maintainer's backend %d: %v, %v", pid, gone, err)
	}
	if err := recvWithin(t, done, time.Minute, "Maintain to return after its backend was terminated"); err == nil {
		t.Fatal("Maintain survived the termination of its backend")
	}
	oldest := PartitionName("processed_event", Hourly, start.Add(-3*time.Hour))
	st, err := patient.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(st.Partitions, func(p ObservedPartition) bool { return p.Name == oldest && p.DetachPending }) {
		t.Fatalf("%s not pending detach after the crash: %+v", oldest, st.Partitions)
	}
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := patient.Maintain(ctx, start.Add(time.Hour), premake, retention)
	if err != nil || !slices.Contains(res.Finalized, oldest) {
		t.Fatalf("next run: finalized %v, err %v", res.Finalized, err)
	}
	assertConverged(t, pool, patient, start.Add(time.Hour), premake, retention)
	// The pool holds no connection with a stale advisory lock: a fresh
	// engine gets the lock at once.
	quick, _ := NewEngine(mpool, tbl, WithAdvisoryLockWait(0), WithoutFirstPartitions())
	if _, err := quick.Maintain(ctx, start.Add(time.Hour), premake, retention); err != nil {
		t.Fatalf("advisory lock leaked: %v", err)
	}
}

// TestPendingDetachOfKeptPartitionIsReattached: a partition still inside the
// window left "detach pending" (by someone else's DETACH CONCURRENTLY that
// was cancelled) is finalized and attached again, so its range accepts
// inserts once more.
func TestPendingDetachOfKeptPartitionIsReattached(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	e := newEngine(t, pool, tbl)
	start := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	const premake, retention = 1, 3 * time.Hour
	if _, err := e.Maintain(ctx, start, premake, retention); err != nil {
		t.Fatal(err)
	}
	current := PartitionName("processed_event", Hourly, start)
	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM processed_event"); err != nil {
		t.Fatal(err)
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Not one string: several statements would form a transaction block,
	// where DETACH CONCURRENTLY is refused. The connection is discarded
	// afterwards rather than returned with the setting.
	defer func() { _ = c.Hijack().Close(context.Background()) }()
	if err := c.Conn().PgConn().Exec(ctx, "SET lock_timeout = 200").Close(); err != nil {
		t.Fatal(err)
	}
	err = c.Conn().PgConn().Exec(ctx, "ALTER TABLE processed_event DETACH PARTITION "+current+" CONCURRENTLY").Close()
	if !isLockTimeout(err) {
		t.Fatalf("setup: DETACH CONCURRENTLY behind a reader = %v, want a lock timeout", err)
	}
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	res, err := e.Maintain(ctx, start, premake, retention)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Finalized, []string{current}) || !slices.Equal(names(res.Created), []string{current}) || len(res.Dropped) != 0 {
		t.Fatalf("finalized %v created %v dropped %v, want %s finalized and attached again", res.Finalized, names(res.Created), names(res.Dropped), current)
	}
	assertConverged(t, pool, e, start, premake, retention)
	in, _ := NewInserter(tbl, "g")
	if r := insertCommit(t, pool, in, idAt(start.Add(time.Minute))); !r.Fresh[0] {
		t.Fatalf("insert into the re-attached partition: %+v", r)
	}
}
