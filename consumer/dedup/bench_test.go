package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvBench enables TestBenchmarkReport; EnvBenchRows overrides its row count.
const (
	EnvBench     = "DEDUP_BENCH"
	EnvBenchRows = "DEDUP_BENCH_ROWS"
)

// TestBenchmarkReport measures, in one run against the same server, the two
// claims the design rests on and prints them as ratios on one final line:
//
//	RESULT drop_vs_delete=<x> batch_vs_single=<y> ...
//
// drop_vs_delete: expiring a 1M-row partition (DETACH CONCURRENTLY + DROP,
// as Maintain does) against DELETE of the same rows from an unpartitioned
// table of the same size, in wall time; drop_vs_delete_vacuum adds the
// VACUUM the DELETE needs before its space is reusable; drop_vs_delete_wal
// compares the WAL bytes written (replication and archiving volume).
// batch_vs_single: one batched dedup insert of 500
// ids against 500 single-row INSERT ... ON CONFLICT in one transaction
// (medians of several rounds). Run with
//
//	DEDUP_BENCH=1 go test ./consumer/dedup/ -run '^TestBenchmarkReport$' -count=1 -v
func TestBenchmarkReport(t *testing.T) {
	if os.Getenv(EnvBench) == "" {
		t.Skipf("set %s=1 to run the benchmark report", EnvBench)
	}
	rows := 1_000_000
	if s := os.Getenv(EnvBenchRows); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			t.Fatalf("%s=%q: want an integer >= 1000", EnvBenchRows, s)
		}
		rows = n
	}
	pool := consumertest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	m := benchDropVsDelete(ctx, t, pool, rows)
	batchMs, singleMs := benchBatchVsSingle(ctx, t, pool, 500, 7)
	fmt.Printf("RESULT drop_vs_delete=%.1f drop_vs_delete_vacuum=%.1f drop_vs_delete_wal=%.0f batch_vs_single=%.1f"+
		" drop_ms=%.1f delete_ms=%.0f vacuum_ms=%.0f batch_ms=%.2f single_ms=%.1f rows=%d\n",
		m.deleteMs/m.dropMs, (m.deleteMs+m.vacuumMs)/m.dropMs, float64(m.deleteWAL)/float64(max(m.dropWAL, 1)), singleMs/batchMs,
		m.dropMs, m.deleteMs, m.vacuumMs, batchMs, singleMs, rows)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dropVsDelete holds the expiry measurements.
type dropVsDelete struct {
	dropMs, deleteMs, vacuumMs float64
	dropWAL, deleteWAL         int64 // bytes of WAL written
}

func walLSN(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	var lsn string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

func walSince(ctx context.Context, t *testing.T, pool *pgxpool.Pool, from string) int64 {
	var n int64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint", from).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func benchDropVsDelete(ctx context.Context, t *testing.T, pool *pgxpool.Pool, rows int) dropVsDelete {
	tbl := Table{Scope: ScopeGlobal, Interval: Daily}
	var stepAt []time.Time
	e := newEngine(t, pool, tbl, WithStepHook(func(_ context.Context, s Step, _ string) error {
		if s == StepDetached || s == StepDropped {
			stepAt = append(stepAt, time.Now())
		}
		return nil
	}))
	day := time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC)
	if _, err := e.Maintain(ctx, day.Add(12*time.Hour), 0, 12*time.Hour); err != nil {
		t.Fatal(err)
	}
	// Ids spread over the day, generated server-side: 48-bit ms prefix of
	// the day plus 80 pseudo-random bits.
	t0 := time.Now()
	if _, err := pool.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group)
		SELECT (encode(substring(int8send($1::bigint + (g * 86399999::bigint / $2::bigint)) from 3 for 6), 'hex') || md5(g::text)::varchar(20))::uuid, 'bench'
		FROM generate_series(1, $2::bigint) g`, day.UnixMilli(), rows); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`CREATE TABLE flat_event (LIKE processed_event INCLUDING ALL)`,
		`INSERT INTO flat_event SELECT * FROM processed_event`,
		// Both tables settled the same way before timing: hint bits set,
		// statistics fresh, dirty pages flushed.
		`VACUUM ANALYZE flat_event`, `VACUUM ANALYZE processed_event`, `CHECKPOINT`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Logf("loaded %d rows twice in %s", rows, time.Since(t0))

	part := Daily.partition("processed_event", day)
	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(st.Partitions, func(p ObservedPartition) bool { return p.Name == part.Name && p.Rows == int64(rows) }) {
		t.Fatalf("partition %s does not hold %d rows: %+v", part.Name, rows, st.Partitions)
	}

	// What Maintain does for an expired partition, timed on its own.
	conn, release, err := e.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m dropVsDelete
	lsn := walLSN(ctx, t, pool)
	t0 = time.Now()
	err = e.detach(ctx, conn, part)
	if err == nil {
		err = e.dropDetached(ctx, conn, part)
	}
	drop := time.Since(t0)
	release()
	if err != nil {
		t.Fatal(err)
	}
	m.dropWAL = walSince(ctx, t, pool, lsn)

	if len(stepAt) == 2 {
		t.Logf("of which detach concurrently %s, drop table %s", stepAt[0].Sub(t0), stepAt[1].Sub(stepAt[0]))
	}
	lo, hi := part.Bounds()
	lsn = walLSN(ctx, t, pool)
	t0 = time.Now()
	tag, err := pool.Exec(ctx, `DELETE FROM flat_event WHERE event_id >= $1 AND event_id < $2`, lo, hi)
	del := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != int64(rows) {
		t.Fatalf("DELETE removed %d rows, want %d", tag.RowsAffected(), rows)
	}
	m.deleteWAL = walSince(ctx, t, pool, lsn)
	// DELETE only marks the rows; the space (heap and index) is reusable
	// after VACUUM, which autovacuum would run next. Timed separately.
	t0 = time.Now()
	if _, err := pool.Exec(ctx, `VACUUM flat_event`); err != nil {
		t.Fatal(err)
	}
	vac := time.Since(t0)
	t.Logf("expire %d rows: detach concurrently + drop %s (%d bytes WAL); DELETE %s (%d bytes WAL), then VACUUM %s",
		rows, drop, m.dropWAL, del, m.deleteWAL, vac)
	m.dropMs, m.deleteMs, m.vacuumMs = ms(drop), ms(del), ms(vac)
	return m
}

func benchBatchVsSingle(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n, rounds int) (batchMs, singleMs float64) {
	tbl := Table{Name: "pe_insert", Scope: ScopeConsumerGroup, Interval: Daily}
	e := newEngine(t, pool, tbl)
	now := time.Now().UTC()
	if _, err := e.Maintain(ctx, now, 1, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	in, err := NewInserter(tbl, "bench")
	if err != nil {
		t.Fatal(err)
	}
	fresh := func() []uuid.UUID {
		ids := make([]uuid.UUID, n)
		for i := range ids {
			ids[i] = idAt(now)
		}
		return ids
	}
	single := `INSERT INTO "public"."pe_insert" (event_id, consumer_group) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING event_id`
	var batchT, singleT []time.Duration
	for r := 0; r < rounds+1; r++ { // round 0 warms the statement caches
		ids := fresh()
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := in.Insert(ctx, tx, ids)
			if err == nil && slices.Contains(res.Fresh, false) {
				err = errors.New("batch: an id was not fresh")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		bt := time.Since(t0)

		ids = fresh()
		t0 = time.Now()
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, id := range ids {
				var got uuid.UUID
				if err := tx.QueryRow(ctx, single, id, "bench").Scan(&got); err != nil {
					return fmt.Errorf("single insert: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		st := time.Since(t0)
		if r > 0 {
			batchT, singleT = append(batchT, bt), append(singleT, st)
		}
	}
	slices.Sort(batchT)
	slices.Sort(singleT)
	mb, msg := batchT[len(batchT)/2], singleT[len(singleT)/2]
	t.Logf("%d ids in one transaction, median of %d: batched %s, single-row %s", n, rounds, mb, msg)
	return ms(mb), ms(msg)
}

// BenchmarkPlanPartitions: the planner on an hourly table with 30 days of
// retention (about 750 partitions), all present.
func BenchmarkPlanPartitions(b *testing.B) {
	now := time.Date(2024, 6, 1, 12, 30, 0, 0, time.UTC)
	var existing []ObservedPartition
	for _, p := range PlanPartitions(now, Hourly, 24, 30*24*time.Hour, "processed_event", nil).Create {
		existing = append(existing, observed(p))
	}
	b.ResetTimer()
	for range b.N {
		PlanPartitions(now, Hourly, 24, 30*24*time.Hour, "processed_event", existing)
	}
}

// BenchmarkInsertBatch500: one Inserter.Insert of 500 fresh ids and commit.
func BenchmarkInsertBatch500(b *testing.B) {
	pool := consumertest.NewPool(b)
	ctx := context.Background()
	tbl := Table{Interval: Daily}
	e, err := NewEngine(pool, tbl)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	if _, err := e.Maintain(ctx, now, 1, 24*time.Hour); err != nil {
		b.Fatal(err)
	}
	in, _ := NewInserter(tbl, "bench")
	ids := make([]uuid.UUID, 500)
	b.ResetTimer()
	for range b.N {
		for i := range ids {
			ids[i] = idAt(now)
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := in.Insert(ctx, tx, ids)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "ids/s")
}
