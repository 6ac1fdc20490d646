package dedup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestEnsureTable(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Schema: "dedup", Name: "processed_event", Scope: ScopeGlobal, Interval: Daily}
	e := newEngine(t, pool, tbl)

	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || st.Owner != testOwner || st.Marker.Scope != ScopeGlobal || st.Marker.Interval != Daily || len(st.Partitions) != 0 {
		t.Fatalf("after EnsureTable: %+v", st)
	}
	var partkey, pk string
	if err := pool.QueryRow(ctx, `SELECT pg_get_partkeydef('dedup.processed_event'::regclass),
		(SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'dedup.processed_event'::regclass AND contype = 'p')`).Scan(&partkey, &pk); err != nil {
		t.Fatal(err)
	}
	if partkey != "RANGE (event_id)" || pk != "PRIMARY KEY (event_id)" {
		t.Fatalf("partition key %q, primary key %q", partkey, pk)
	}
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatalf("second EnsureTable: %v", err)
	}
	var claims int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE pronamespace = 'dedup'::regnamespace
		AND proname IN ('processed_event_claim', 'processed_event_claim_one')`).Scan(&claims); err != nil || claims != 2 {
		t.Fatalf("after EnsureTable: %d claim functions (err %v), want 2", claims, err)
	}

	t.Run("another owner is refused", func(t *testing.T) {
		err := e.EnsureTable(ctx, "someone-else")
		var oe *OwnershipError
		if !errors.As(err, &oe) || oe.Owner != testOwner || oe.Table != "dedup.processed_event" {
			t.Fatalf("EnsureTable(other owner) = %v, want *OwnershipError naming %s", err, testOwner)
		}
		if err := e.DropTable(ctx, "someone-else"); !errors.As(err, &oe) {
			t.Fatalf("DropTable(other owner) = %v, want *OwnershipError", err)
		}
	})

	t.Run("a table without marker is refused", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `CREATE TABLE public.unmarked (event_id uuid NOT NULL, consumer_group text NOT NULL,
			processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (event_id)) PARTITION BY RANGE (event_id)`); err != nil {
			t.Fatal(err)
		}
		other, err := NewEngine(pool, Table{Name: "unmarked", Scope: ScopeGlobal}, WithoutFirstPartitions())
		if err != nil {
			t.Fatal(err)
		}
		var oe *OwnershipError
		if err := other.EnsureTable(ctx, testOwner); !errors.As(err, &oe) || oe.Owner != "" {
			t.Fatalf("EnsureTable(unmarked) = %v, want *OwnershipError with empty owner", err)
		}
		if _, err := other.Maintain(ctx, time.Now(), 1, time.Hour*24); !errors.As(err, &oe) {
			t.Fatalf("Maintain(unmarked) = %v, want *OwnershipError", err)
		}
		if err := other.DropTable(ctx, testOwner); !errors.As(err, &oe) {
			t.Fatalf("DropTable(unmarked) = %v, want *OwnershipError", err)
		}
	})

	t.Run("layout mismatches are reported", func(t *testing.T) {
		var le *LayoutError
		scope, _ := NewEngine(pool, Table{Schema: "dedup", Scope: ScopeConsumerGroup, Interval: Daily}, WithoutFirstPartitions())
		if err := scope.EnsureTable(ctx, testOwner); !errors.As(err, &le) || !strings.Contains(err.Error(), "primary key is (event_id)") {
			t.Fatalf("EnsureTable(other scope) = %v, want *LayoutError about the primary key", err)
		}
		iv, _ := NewEngine(pool, Table{Schema: "dedup", Scope: ScopeGlobal, Interval: Hourly}, WithoutFirstPartitions())
		if err := iv.EnsureTable(ctx, testOwner); !errors.As(err, &le) || !strings.Contains(err.Error(), "interval") {
			t.Fatalf("EnsureTable(other interval) = %v, want *LayoutError about the interval", err)
		}
		// A table that carries a forged marker but is partitioned by time.
		if _, err := pool.Exec(ctx, `CREATE TABLE public.naive (event_id uuid NOT NULL, consumer_group text NOT NULL,
			processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (event_id, processed_at)) PARTITION BY RANGE (processed_at);
			COMMENT ON TABLE public.naive IS '{"idempotency.dev/owner":"`+testOwner+`","scope":"Global","interval":"Daily","version":1}'`); err != nil {
			t.Fatal(err)
		}
		naive, _ := NewEngine(pool, Table{Name: "naive", Scope: ScopeGlobal, Interval: Daily}, WithoutFirstPartitions())
		err := naive.EnsureTable(ctx, testOwner)
		if !errors.As(err, &le) || !strings.Contains(err.Error(), "RANGE (processed_at)") || !strings.Contains(err.Error(), "primary key is (event_id, processed_at)") {
			t.Fatalf("EnsureTable(naive layout) = %v, want *LayoutError about partition key and primary key", err)
		}
	})

	t.Run("DropTable drops only what it owns", func(t *testing.T) {
		if err := e.DropTable(ctx, testOwner); err != nil {
			t.Fatal(err)
		}
		if st, err := e.Observe(ctx); err != nil || st.Exists {
			t.Fatalf("after DropTable: exists=%v err=%v", st.Exists, err)
		}
		// DROP TABLE leaves functions behind; DropTable must drop the claim
		// functions itself, or a later DROP SCHEMA without CASCADE fails.
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE pronamespace = 'dedup'::regnamespace
			AND proname IN ('processed_event_claim', 'processed_event_claim_one')`).Scan(&left); err != nil || left != 0 {
			t.Fatalf("after DropTable: %d claim functions left (err %v), want 0", left, err)
		}
		if err := e.DropTable(ctx, testOwner); err != nil {
			t.Fatalf("DropTable of a missing table = %v, want nil", err)
		}
		if _, err := e.Maintain(ctx, time.Now(), 1, 24*time.Hour); !errors.Is(err, ErrTableNotFound) {
			t.Fatalf("Maintain of a missing table = %v, want ErrTableNotFound", err)
		}
	})
}

func TestMaintainCreatesAndDrops(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	e := newEngine(t, pool, Table{Interval: Hourly})
	now := time.Date(2024, 2, 29, 22, 30, 0, 0, time.UTC)

	res, err := e.Maintain(ctx, now, 3, 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := PlanPartitions(now, Hourly, 3, 3*time.Hour, "processed_event", nil).Create
	if !slices.Equal(names(res.Created), names(want)) {
		t.Fatalf("created %v, want %v", names(res.Created), names(want))
	}
	if wf, wt := time.Date(2024, 2, 29, 19, 0, 0, 0, time.UTC), time.Date(2024, 3, 1, 2, 0, 0, 0, time.UTC); !res.Window.From.Equal(wf) || !res.Window.To.Equal(wt) {
		t.Fatalf("window %s, want [%s, %s)", res.Window, wf, wt)
	}
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Partitions) != len(want) || len(st.Foreign) != 0 || len(st.Orphans) != 0 {
		t.Fatalf("observed %v foreign %v orphans %v", partitionNames(st.Partitions), st.Foreign, names(st.Orphans))
	}
	// The result carries the partitions after the run, as Observe sees them.
	if !slices.Equal(res.Partitions, st.Partitions) {
		t.Fatalf("result partitions %+v, observed %+v", res.Partitions, st.Partitions)
	}
	// Every partition carries the bounds CHECK, the primary key and the BRIN
	// index copied from the parent.
	var checks, pkeys, brins int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_constraint WHERE conname = 'idempotency_bounds' AND conrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'processed_event'::regclass)),
		(SELECT count(*) FROM pg_constraint WHERE contype = 'p' AND conrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'processed_event'::regclass)),
		(SELECT count(*) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am a ON a.oid = i.relam
		  WHERE a.amname = 'brin' AND x.indrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'processed_event'::regclass))`).Scan(&checks, &pkeys, &brins); err != nil {
		t.Fatal(err)
	}
	if checks != len(want) || pkeys != len(want) || brins != len(want) {
		t.Fatalf("%d partitions but %d bound checks, %d primary keys, %d brin indexes", len(want), checks, pkeys, brins)
	}

	// Rows and row estimates.
	in, err := NewInserter(Table{Interval: Hourly}, "g1")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, 0, 300)
	for i := 0; i < 300; i++ {
		ids = append(ids, idAt(now.Add(time.Duration(i)*time.Second)))
	}
	insertCommit(t, pool, in, ids...)
	if _, err := pool.Exec(ctx, "ANALYZE processed_event"); err != nil {
		t.Fatal(err)
	}
	st, err = e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range st.Partitions {
		if p.Name == "processed_event_p2024022922" {
			found = true
			if p.Rows != 300 {
				t.Fatalf("row estimate of %s = %d, want 300", p.Name, p.Rows)
			}
		}
	}
	if !found {
		t.Fatalf("partition processed_event_p2024022922 not observed: %v", partitionNames(st.Partitions))
	}

	// Three hours later: three expired partitions go, three new ones come.
	res, err = e.Maintain(ctx, now.Add(3*time.Hour), 3, 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(res.Dropped), []string{"processed_event_p2024022919", "processed_event_p2024022920", "processed_event_p2024022921"}; !slices.Equal(got, want) {
		t.Fatalf("dropped %v, want %v", got, want)
	}
	if got, want := names(res.Created), []string{"processed_event_p2024030102", "processed_event_p2024030103", "processed_event_p2024030104"}; !slices.Equal(got, want) {
		t.Fatalf("created %v, want %v", got, want)
	}
	if got, want := partitionNames(res.Partitions), names(PlanPartitions(now.Add(3*time.Hour), Hourly, 3, 3*time.Hour, "processed_event", nil).Create); !slices.Equal(got, want) {
		t.Fatalf("result partitions %v, want %v", got, want)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname IN ('processed_event_p2024022919', 'processed_event_p2024022920', 'processed_event_p2024022921')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d dropped tables still exist (err %v)", left, err)
	}
	if countRows(t, pool, "processed_event") != 300 {
		t.Fatal("rows in kept partitions were lost")
	}
	// Nothing left to do: a re-run is a no-op.
	res, err = e.Maintain(ctx, now.Add(3*time.Hour), 3, 3*time.Hour)
	if err != nil || len(res.Created)+len(res.Dropped)+len(res.Finalized) != 0 {
		t.Fatalf("re-run did %+v, err %v", res, err)
	}
	// DropTable takes the partitions (one statement each) and the parent.
	if err := e.DropTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'processed\_event%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d relations left after DropTable (err %v)", left, err)
	}
}

func TestConcurrentMaintainersSerialise(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	newEngine(t, pool, tbl)
	now := time.Date(2024, 12, 31, 23, 10, 0, 0, time.UTC)
	var wg sync.WaitGroup
	results := make([]Result, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := NewEngine(pool, tbl, WithoutFirstPartitions())
			if err != nil {
				errs[i] = err
				return
			}
			results[i], errs[i] = e.Maintain(ctx, now, 6, 12*time.Hour)
		}()
	}
	waitWithin(t, &wg, 2*time.Minute, "the maintainers")
	created := 0
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("maintainer %d: %v", i, errs[i])
		}
		created += len(results[i].Created)
	}
	want := len(PlanPartitions(now, Hourly, 6, 12*time.Hour, "processed_event", nil).Create)
	if created != want {
		t.Fatalf("maintainers created %d partitions in total, want %d (each exactly once)", created, want)
	}
}

func TestForeignPartitionsAreLeftAlone(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	e := newEngine(t, pool, Table{Interval: Daily})
	day0 := time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC)
	lo, hi := BoundaryUUID(day0.AddDate(0, 0, -5)), BoundaryUUID(day0.AddDate(0, 0, -4))
	if _, err := pool.Exec(ctx, `CREATE TABLE manual_part PARTITION OF processed_event FOR VALUES FROM ('`+lo.String()+`') TO ('`+hi.String()+`')`); err != nil {
		t.Fatal(err)
	}
	res, err := e.Maintain(ctx, day0, 1, 6*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Foreign, []string{"manual_part"}) {
		t.Fatalf("foreign = %v, want [manual_part]", res.Foreign)
	}
	// Every day of the window but the foreign partition's (January 5th).
	want := []string{"processed_event_p20240104", "processed_event_p20240106", "processed_event_p20240107",
		"processed_event_p20240108", "processed_event_p20240109", "processed_event_p20240110", "processed_event_p20240111"}
	if got := names(res.Created); !slices.Equal(got, want) {
		t.Fatalf("created %v, want %v (nothing over the foreign partition)", got, want)
	}
	// Long after its range expired, the foreign partition is still there.
	if _, err := e.Maintain(ctx, day0.AddDate(0, 0, 30), 1, 6*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(partitionNames(st.Partitions), "manual_part") {
		t.Fatalf("foreign partition was touched: %v", partitionNames(st.Partitions))
	}
	if err := e.DropTable(ctx, testOwner); err == nil || !strings.Contains(err.Error(), "foreign partitions") {
		t.Fatalf("DropTable with a foreign partition = %v, want a refusal", err)
	}
}

// TestNameConflicts: a legacy table renamed out of the new table's way keeps
// its primary key index, named <table>_pkey, which the new table's primary
// key needs; a type can hold the table's name; a table that is not ours can
// hold a partition's name. Each is reported as a *NameConflictError naming
// the holder and what to do (also a *LayoutError), not as SQLSTATE 42P07,
// and nothing is created; once the name is freed, the same call succeeds.
func TestNameConflicts(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	mustExec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	checkConflict := func(err error, name, kind, of string) {
		t.Helper()
		var nc *NameConflictError
		if !errors.As(err, &nc) || nc.Name != name || nc.Kind != kind || nc.Of != of {
			t.Fatalf("err = %v, want a *NameConflictError for %s %s (of %q)", err, kind, name, of)
		}
		var le *LayoutError
		if !errors.As(err, &le) {
			t.Fatalf("%v does not match *LayoutError", err)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			t.Fatalf("%v carries the raw SQLSTATE %s", err, pgErr.Code)
		}
		if IsRetryable(err) {
			t.Fatalf("%v is reported retryable; it needs a person", err)
		}
	}

	t.Run("renamed legacy table's primary key", func(t *testing.T) {
		mustExec(`CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now());
			ALTER TABLE processed_event RENAME TO processed_event_legacy`)
		e, _ := NewEngine(pool, Table{Interval: Daily}, WithoutFirstPartitions())
		err := e.EnsureTable(ctx, testOwner)
		checkConflict(err, "public.processed_event_pkey", "index", "public.processed_event_legacy")
		if !strings.Contains(err.Error(), "ALTER INDEX public.processed_event_pkey RENAME TO") || !strings.Contains(err.Error(), "primary key") {
			t.Fatalf("message does not say what to do: %v", err)
		}
		if st, err := e.Observe(ctx); err != nil || st.Exists {
			t.Fatalf("table created despite the conflict (exists %v, err %v)", st.Exists, err)
		}
		mustExec(`ALTER INDEX processed_event_pkey RENAME TO processed_event_legacy_pkey`)
		if err := e.EnsureTable(ctx, testOwner); err != nil {
			t.Fatalf("EnsureTable after the rename: %v", err)
		}
	})

	t.Run("a type with the table's name", func(t *testing.T) {
		mustExec(`CREATE TYPE other_event AS ENUM ('x')`)
		e, _ := NewEngine(pool, Table{Name: "other_event"}, WithoutFirstPartitions())
		checkConflict(e.EnsureTable(ctx, testOwner), "public.other_event", "type", "")
	})

	t.Run("a table with a partition's name", func(t *testing.T) {
		now := time.Date(2024, 1, 10, 12, 0, 0, 0, time.UTC)
		e, _ := NewEngine(pool, Table{Interval: Daily}, WithoutFirstPartitions())
		mustExec(`CREATE TABLE processed_event_p20240111 (x int)`)
		res, err := e.Maintain(ctx, now, 1, 24*time.Hour)
		checkConflict(err, "public.processed_event_p20240111", "table", "")
		if !strings.Contains(err.Error(), "partition processed_event_p20240111") {
			t.Fatalf("message does not name the partition: %v", err)
		}
		if !slices.Contains(partitionNames(res.Partitions), "processed_event_p20240110") {
			t.Fatalf("the current partition, created first, is not reported: %v", partitionNames(res.Partitions))
		}
		mustExec(`DROP TABLE processed_event_p20240111`)
		if _, err := e.Maintain(ctx, now, 1, 24*time.Hour); err != nil {
			t.Fatalf("Maintain once the name is free: %v", err)
		}
	})
}

// TestEngineBoundsItsWaits: the engine's statements run under
// statement_timeout, its session is bounded by a client deadline, and a
// maintainer waits for another one's advisory lock only as long as
// WithAdvisoryLockWait allows.
func TestEngineBoundsItsWaits(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	if _, err := NewEngine(pool, tbl, WithLockTimeout(time.Second), WithStatementTimeout(time.Second), WithoutFirstPartitions()); err == nil {
		t.Fatal("NewEngine accepted a statement timeout not above the lock timeout")
	}
	e := newEngine(t, pool, tbl, WithLockTimeout(100*time.Millisecond), WithStatementTimeout(300*time.Millisecond),
		WithAdvisoryLockWait(300*time.Millisecond))

	conn, release, err := e.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	err = e.exec(ctx, conn, "SELECT pg_sleep(30)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" || time.Since(t0) > 10*time.Second {
		t.Fatalf("a long statement in the session: %v after %s, want statement_timeout (57014) at once", err, time.Since(t0))
	}
	release()
	var lt, st, sp string
	if err := pool.QueryRow(ctx, "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'), current_setting('search_path')").Scan(&lt, &st, &sp); err != nil || lt != "0" || st != "0" || sp != `"$user", public` {
		t.Fatalf("settings leaked into the pool: lock_timeout %q statement_timeout %q search_path %q (err %v)", lt, st, sp, err)
	}

	// Another maintainer (here, a plain session) holds the table's lock.
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	key, err := e.lockKey(ctx, holder.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	_, err = e.Maintain(context.Background(), time.Now(), 1, time.Hour)
	if !IsRetryable(err) || time.Since(t0) > 5*time.Second {
		t.Fatalf("Maintain behind another maintainer: %v after %s, want a retryable error after about 300ms", err, time.Since(t0))
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
		t.Fatal(err)
	}
	res, err := e.Maintain(ctx, time.Now(), 1, time.Hour)
	if err != nil || len(res.Created) == 0 {
		t.Fatalf("Maintain once the lock is free: created %v, err %v", names(res.Created), err)
	}

	// pg_get_expr, which renders the bounds, locks each partition: behind
	// an ACCESS EXCLUSIVE lock on one, Observe gives up with a retryable
	// error after the lock timeout instead of waiting.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE "+res.Created[0].Name+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	_, err = e.Observe(context.Background())
	if !IsRetryable(err) || time.Since(t0) > 5*time.Second {
		t.Fatalf("Observe behind an ACCESS EXCLUSIVE lock on a partition: %v after %s, want a retryable error at once", err, time.Since(t0))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Observe(ctx); err != nil {
		t.Fatalf("Observe once the lock is gone: %v", err)
	}
}
