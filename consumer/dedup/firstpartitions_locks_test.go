package dedup

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// startDefaultLocksServer starts a server of its own with PostgreSQL's
// default lock table (max_locks_per_transaction 64, max_connections 100),
// not the shared test cluster's larger one, and returns a pool on it.
func startDefaultLocksServer(t *testing.T) *pgxpool.Pool {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	pg, err := consumertest.StartPostgres(
		consumertest.WithSetting("max_connections", "100"),
		consumertest.WithSetting("max_locks_per_transaction", "64"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	pool, err := pgxpool.New(testCtx(t), pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestFirstPartitionsDefaultLockTable: new tables with the longest Hourly
// window the policy allows (some 2,000 partitions each) are maintained at
// the same time, as the operator's concurrent reconciles do, on a server
// with PostgreSQL's default lock table (max_locks_per_transaction 64,
// max_connections 100). Each partition holds five locks until its
// transaction ends (the table, its two indexes, the parent's), so a table's
// first partitions all in one transaction hold some 10,000 locks at once,
// and the shared lock table (sized for 64 per connection) runs out of
// memory (SQLSTATE 53200): on every run, and for the server's other
// clients too.
func TestFirstPartitionsDefaultLockTable(t *testing.T) {
	pool := startDefaultLocksServer(t)
	ctx := testCtx(t)
	now := time.Date(2025, 3, 1, 12, 30, 0, 0, time.UTC)
	retention := 2000 * time.Hour
	const tables = 3
	engines := make([]*Engine, tables)
	for i := range engines {
		engines[i] = newEngine(t, pool, Table{Name: fmt.Sprintf("events_%d", i), Interval: Hourly})
	}
	errs := make(chan error, tables)
	for _, e := range engines {
		go func() {
			_, err := e.Maintain(ctx, now, DefaultPremake, retention)
			errs <- err
		}()
	}
	for range engines {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, e := range engines {
		assertConverged(t, pool, e, now, DefaultPremake, retention)
	}
}

// TestFirstPartitionsWithinStatementDeadline: the engine bounds each call
// by statement_timeout plus a grace (bounded); the server applies
// statement_timeout to each statement of a multi-statement string, the
// client's deadline to the whole string. The longest Hourly window's first
// partitions in one string took longer than a short statement_timeout's
// deadline, so the client cut the transaction on every run and the table
// never got a partition.
func TestFirstPartitionsWithinStatementDeadline(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	e := newEngine(t, pool, Table{Interval: Hourly}, WithStatementTimeout(time.Second))
	now := time.Date(2025, 3, 1, 12, 30, 0, 0, time.UTC)
	retention := 2000 * time.Hour
	if _, err := e.Maintain(ctx, now, DefaultPremake, retention); err != nil {
		t.Fatal(err)
	}
	assertConverged(t, pool, e, now, DefaultPremake, retention)
}

// TestFirstPartitionsCrashBetweenTransactions: a crash after the first of
// several transactions of first partitions leaves those attached, the
// current and premade ones among them, and the next run creates the rest.
func TestFirstPartitionsCrashBetweenTransactions(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	clean := newEngine(t, pool, tbl)
	hook, hit := crashAt(StepAttached)
	crashy, err := NewEngine(pool, tbl, WithStepHook(hook), WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 3, 1, 12, 30, 0, 0, time.UTC)
	const premake, retention = 3, 30 * time.Hour
	res, err := crashy.Maintain(ctx, now, premake, retention)
	if !errors.Is(err, errCrash) {
		t.Fatalf("Maintain with a crash after the first transaction = %v, want the crash", err)
	}
	if len(res.Created) != firstPartitionsPerTransaction || len(res.Partitions) != firstPartitionsPerTransaction {
		t.Fatalf("after the crash (at %s): created %v, attached %v; want the first %d", *hit, names(res.Created), partitionNames(res.Partitions), firstPartitionsPerTransaction)
	}
	if !res.Window.Contains(now) || !res.Window.Contains(now.Add(premake*time.Hour)) {
		t.Fatalf("after the crash the window %v does not cover now and the premade hours", res.Window)
	}
	res, err = clean.Maintain(ctx, now, premake, retention)
	if err != nil {
		t.Fatal(err)
	}
	want := len(PlanPartitions(now, Hourly, premake, retention, tbl.WithDefaults().Name, nil).Create) - firstPartitionsPerTransaction
	if len(res.Created) != want {
		t.Fatalf("the next run created %d, want %d", len(res.Created), want)
	}
	assertConverged(t, pool, clean, now, premake, retention)
}
