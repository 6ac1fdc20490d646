package dedup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// writers inserts batches continuously until stopped, recording the
// latency of every Insert call and every failure.
type writers struct {
	t         *testing.T
	mu        sync.Mutex
	latencies []time.Duration
	errs      []error
	rows      atomic.Int64
	wg        sync.WaitGroup
	stop      chan struct{}
	stopOnce  sync.Once
}

// startWriters starts n writers. They are stopped by finish or, if the test
// ends first (a failure), by a cleanup that runs before the pool is closed:
// a writer left running would keep the pool busy and spin on its errors.
func startWriters(ctx context.Context, t *testing.T, pool *pgxpool.Pool, in *Inserter, n, batch int, from, to time.Time) *writers {
	w := &writers{t: t, stop: make(chan struct{})}
	t.Cleanup(func() { w.stopOnce.Do(func() { close(w.stop) }); w.wg.Wait() })
	span := to.Sub(from)
	for range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			ids := make([]uuid.UUID, batch)
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				for i := range ids {
					ids[i] = idAt(from.Add(time.Duration(rand.Int64N(int64(span)))))
				}
				var took time.Duration
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					t0 := time.Now()
					res, err := in.Insert(ctx, tx, ids)
					took = time.Since(t0)
					if err != nil {
						return err
					}
					if slices.Contains(res.Outside, true) || slices.Contains(res.Fresh, false) {
						return fmt.Errorf("batch not all fresh and inside: %+v", res)
					}
					return nil
				})
				w.mu.Lock()
				w.latencies = append(w.latencies, took)
				if err != nil {
					w.errs = append(w.errs, err)
				}
				w.mu.Unlock()
				if err == nil {
					w.rows.Add(int64(batch))
				}
			}
		}()
	}
	return w
}

func (w *writers) finish() (lat []time.Duration, errs []error) {
	w.stopOnce.Do(func() { close(w.stop) })
	waitWithin(w.t, &w.wg, time.Minute, "the writers to stop")
	w.mu.Lock()
	defer w.mu.Unlock()
	slices.Sort(w.latencies)
	return w.latencies, w.errs
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

// wallClock reports whether the test asserts its wall-clock bounds: not
// under -short, which is for machines too loaded for timing (the figures are
// logged either way). What does not depend on the clock (no failed insert,
// no insert queued on a lock, the retryable error) is asserted always.
func wallClock(t *testing.T) bool {
	t.Helper()
	if testing.Short() {
		t.Log("a wall-clock bound was exceeded; not asserted under -short")
		return false
	}
	return true
}

// lockWaitSampler counts, every few milliseconds, backends running our
// INSERT that wait on a relation lock: a writer queued behind maintenance
// DDL would show up here.
func lockWaitSampler(ctx context.Context, t *testing.T, pool *pgxpool.Pool) (stop func() (samples, waits int)) {
	var samples, waits atomic.Int64
	done := make(chan struct{})
	finished := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(done) }); <-finished }
	t.Cleanup(halt) // stops it before the pool is closed if the test fails first
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'relation'
				  AND query LIKE 'INSERT INTO "public"."processed_event"%'`).Scan(&n)
			if err == nil {
				samples.Add(1)
				waits.Add(int64(n))
			}
		}
	}()
	return func() (int, int) {
		halt()
		return int(samples.Load()), int(waits.Load())
	}
}

// TestMaintenanceUnderLoad: writers insert continuously while the engine
// creates premade partitions and drops expired ones (detach concurrently +
// drop). No insert fails, none waits longer than the lock_timeout (plus
// slack for a busy machine), and none is ever seen queued on a relation lock.
func TestMaintenanceUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	pool := newPool(t)
	ctx := testCtx(t)
	const lockTimeout = 500 * time.Millisecond
	tbl := Table{Interval: Hourly}
	e := newEngine(t, pool, tbl, WithLockTimeout(lockTimeout))
	base := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	const premake, retention, steps = 2, 24 * time.Hour, 8
	if _, err := e.Maintain(ctx, base, premake, retention); err != nil {
		t.Fatal(err)
	}
	// Fill the partitions that will expire, so the drops have data to drop.
	if _, err := pool.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group)
		SELECT (encode(substring(int8send(($1::bigint + g * 997) % $2::bigint + $3::bigint) from 3 for 6), 'hex') || md5(g::text)::varchar(20))::uuid, 'seed'
		FROM generate_series(1, 50000) g ON CONFLICT DO NOTHING`,
		int64(0), (12 * time.Hour).Milliseconds(), base.Add(-24*time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}

	in, _ := NewInserter(tbl, "load", WithRefreshInterval(100*time.Millisecond))
	// Ids from the partitions that stay through every step.
	w := startWriters(ctx, t, pool, in, 4, 100, base.Add(-12*time.Hour), base.Add(time.Hour))
	stopSampler := lockWaitSampler(ctx, t, pool)
	time.Sleep(500 * time.Millisecond)

	t0 := time.Now()
	created, dropped := 0, 0
	for k := 1; k <= steps; k++ {
		res, err := e.Maintain(ctx, base.Add(time.Duration(k)*time.Hour), premake, retention)
		if err != nil {
			w.finish()
			t.Fatalf("Maintain step %d: %v", k, err)
		}
		created += len(res.Created)
		dropped += len(res.Dropped)
		time.Sleep(100 * time.Millisecond)
	}
	maintDur := time.Since(t0)
	time.Sleep(300 * time.Millisecond)
	lat, errs := w.finish()
	samples, waits := stopSampler()
	elapsed := time.Since(t0) + 800*time.Millisecond
	rate := float64(w.rows.Load()) / elapsed.Seconds()

	t.Logf("maintenance: %d steps in %s, created %d, dropped %d partitions", steps, maintDur, created, dropped)
	t.Logf("writers: %d batches, %d rows, %.0f rows/s; insert latency p50 %s p99 %s max %s; lock-wait samples %d/%d",
		len(lat), w.rows.Load(), rate, pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1), waits, samples)
	if created != steps || dropped != steps {
		t.Fatalf("created %d and dropped %d partitions, want %d each", created, dropped, steps)
	}
	if len(errs) > 0 {
		t.Fatalf("%d inserts failed, first: %v", len(errs), errs[0])
	}
	if len(lat) < 50 {
		t.Fatalf("only %d batches ran", len(lat))
	}
	if rate < 1000 {
		t.Fatalf("writers managed %.0f rows/s, want thousands", rate)
	}
	// Slack for a shared machine under -race, as refresh_test.go has: a
	// DDL step that waited for its lock without lock_timeout would hold
	// the writers far longer (the sampler's waits check says so too).
	const slack = 3 * time.Second
	if max := pct(lat, 1); max > lockTimeout+slack {
		t.Fatalf("an insert took %s, more than lock_timeout %s + %s", max, lockTimeout, slack)
	}
	if waits != 0 {
		t.Fatalf("writers were seen waiting on a relation lock %d times", waits)
	}
}

// TestMaintenanceBacksOffBehindLongTransaction: a long transaction holds
// SHARE UPDATE EXCLUSIVE on the parent (as a long ANALYZE or CREATE INDEX
// CONCURRENTLY would), which ATTACH and DETACH need too. Maintenance gives up
// with a retryable error after its bounded retries, the writers keep going
// unaffected meanwhile, and the next run after the transaction succeeds.
func TestMaintenanceBacksOffBehindLongTransaction(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	const lockTimeout = 200 * time.Millisecond
	tbl := Table{Interval: Hourly}
	e := newEngine(t, pool, tbl, WithLockTimeout(lockTimeout), WithAttempts(3), WithBackoff(50*time.Millisecond, 200*time.Millisecond))
	base := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	if _, err := e.Maintain(ctx, base, 2, 6*time.Hour); err != nil {
		t.Fatal(err)
	}
	in, _ := NewInserter(tbl, "load")
	w := startWriters(ctx, t, pool, in, 2, 50, base.Add(-2*time.Hour), base.Add(time.Hour))

	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, "LOCK TABLE processed_event IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	res, err := e.Maintain(ctx, base.Add(time.Hour), 2, 6*time.Hour)
	took := time.Since(t0)
	if !IsRetryable(err) {
		w.finish()
		t.Fatalf("Maintain behind the lock = %v, want a retryable error", err)
	}
	t.Logf("gave up after %s: %v", took, err)
	// 3 attempts of at most lockTimeout each plus two pauses of at most 200ms.
	if bound := 3*lockTimeout + 2*200*time.Millisecond + 2*time.Second; took > bound && wallClock(t) {
		t.Fatalf("Maintain took %s to give up, more than %s", took, bound)
	}
	if len(res.Created) != 0 {
		t.Fatalf("created %v behind the lock", names(res.Created))
	}
	time.Sleep(200 * time.Millisecond)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	lat, errs := w.finish()
	if len(errs) > 0 {
		t.Fatalf("%d inserts failed, first: %v", len(errs), errs[0])
	}
	t.Logf("writers: %d batches, max insert latency %s", len(lat), pct(lat, 1))
	if max := pct(lat, 1); max > lockTimeout+3*time.Second && wallClock(t) {
		t.Fatalf("an insert took %s while maintenance was retrying", max)
	}
	res, err = e.Maintain(ctx, base.Add(time.Hour), 2, 6*time.Hour)
	if err != nil || len(res.Created) != 1 || len(res.Dropped) != 1 {
		t.Fatalf("after the lock was released: created %v dropped %v err %v", names(res.Created), names(res.Dropped), err)
	}
}
