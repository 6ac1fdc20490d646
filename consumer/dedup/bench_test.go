package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvBench enables TestBenchmarkReport; EnvBenchRows overrides its rows per
// day (1M), EnvBenchDays its retention window in days (7) and
// EnvBenchRounds how many days expire one at a time (3).
const (
	EnvBench       = "DEDUP_BENCH"
	EnvBenchRows   = "DEDUP_BENCH_ROWS"
	EnvBenchDays   = "DEDUP_BENCH_DAYS"
	EnvBenchRounds = "DEDUP_BENCH_ROUNDS"
)

// TestBenchmarkReport measures, in one run against the same server, the two
// claims the design rests on and prints them as ratios on one final line:
//
//	RESULT drop_vs_delete=<x> ... batch_vs_single=<y> ...
//
// Expiry: both tables hold the same retention window, DEDUP_BENCH_DAYS days
// of DEDUP_BENCH_ROWS rows each, and then the oldest days expire one at a
// time, DEDUP_BENCH_ROUNDS rounds, each timing both sides back to back.
//   - partitioned: our table, one partition a day; the expired day goes with
//     DETACH CONCURRENTLY + DROP TABLE (drop_ms, split into detach_ms and
//     droptable_ms); and, after the rounds, the next day through a whole
//     Maintain call as the operator runs it (maintain_ms).
//   - baseline: the legacy layout a retention job faces, one unpartitioned
//     table with PRIMARY KEY (event_id) and a B-tree index on processed_at;
//     the job runs DELETE ... WHERE processed_at < cutoff (delete_ms), and
//     the VACUUM that must follow before the space is reused (vacuum_ms).
//   - storage: writing a file as large as the partition next to the data
//     directory and truncating it (fs_free_ms), which is what the file
//     system charges DROP TABLE for freeing the partition's files.
//
// Ratios are per round, paired, and the report gives their median (and the
// range for the headline): drop_vs_delete = delete_ms / drop_ms (DELETE
// alone); drop_vs_delete_vacuum = (delete_ms + vacuum_ms) / drop_ms;
// detach_vs_delete = delete_ms / detach_ms (the rows are out of the table
// once the detach commits; the DROP TABLE that follows frees files of a
// table nothing reads); the _wal ratios compare WAL bytes (what replicas
// and archives absorb). batch_vs_single: one batched dedup insert of 500 ids
// against 500 single-row INSERT ... ON CONFLICT in one transaction (medians
// of several rounds). Run with
//
//	DEDUP_BENCH=1 go test ./consumer/dedup/ -run '^TestBenchmarkReport$' -count=1 -v -timeout 30m
//
// The server's data directory is made under TMPDIR, so TMPDIR=/dev/shm
// measures the same on tmpfs, without the disk.
func TestBenchmarkReport(t *testing.T) {
	if os.Getenv(EnvBench) == "" {
		t.Skipf("set %s=1 to run the benchmark report", EnvBench)
	}
	rows := benchEnvInt(t, EnvBenchRows, 1_000_000, 1000)
	rounds := benchEnvInt(t, EnvBenchRounds, 3, 1)
	days := benchEnvInt(t, EnvBenchDays, 7, rounds+2)
	pool := newPoolWithin(t, 60*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()

	m := benchExpiry(ctx, t, pool, rows, days, rounds)
	batchMs, singleMs := benchBatchVsSingle(ctx, t, pool, 500, 7)
	ratio := func(a, b float64) float64 { return a / max(b, 1e-9) }
	perRound := func(f func(r expiryRound) float64) []float64 {
		out := make([]float64, len(m.rounds))
		for i, r := range m.rounds {
			out[i] = f(r)
		}
		return out
	}
	dropVsDelete := perRound(func(r expiryRound) float64 { return ratio(r.deleteMs, r.dropMs) })
	fmt.Printf("RESULT drop_vs_delete=%.1f drop_vs_delete_min=%.1f drop_vs_delete_max=%.1f drop_vs_delete_vacuum=%.1f detach_vs_delete=%.1f maintain_vs_delete=%.1f"+
		" drop_vs_delete_wal=%.0f drop_vs_delete_vacuum_wal=%.0f batch_vs_single=%.1f"+
		" drop_ms=%.1f detach_ms=%.1f droptable_ms=%.1f fs_free_ms=%.1f maintain_ms=%.1f delete_ms=%.0f vacuum_ms=%.0f"+
		" drop_wal=%.0f delete_wal=%.0f vacuum_wal=%.0f partition_mb=%.0f legacy_mb=%.0f batch_ms=%.2f single_ms=%.1f rows=%d days=%d rounds=%d\n",
		median(dropVsDelete), slices.Min(dropVsDelete), slices.Max(dropVsDelete),
		median(perRound(func(r expiryRound) float64 { return ratio(r.deleteMs+r.vacuumMs, r.dropMs) })),
		median(perRound(func(r expiryRound) float64 { return ratio(r.deleteMs, r.detachMs) })),
		ratio(median(perRound(func(r expiryRound) float64 { return r.deleteMs })), m.maintainMs),
		median(perRound(func(r expiryRound) float64 { return ratio(r.deleteWAL, max(r.dropWAL, 1)) })),
		median(perRound(func(r expiryRound) float64 { return ratio(r.deleteWAL+r.vacuumWAL, max(r.dropWAL, 1)) })),
		ratio(singleMs, batchMs),
		median(perRound(func(r expiryRound) float64 { return r.dropMs })), median(perRound(func(r expiryRound) float64 { return r.detachMs })),
		median(perRound(func(r expiryRound) float64 { return r.dropTableMs })), median(perRound(func(r expiryRound) float64 { return r.fsFreeMs })),
		m.maintainMs, median(perRound(func(r expiryRound) float64 { return r.deleteMs })), median(perRound(func(r expiryRound) float64 { return r.vacuumMs })),
		median(perRound(func(r expiryRound) float64 { return r.dropWAL })), median(perRound(func(r expiryRound) float64 { return r.deleteWAL })),
		median(perRound(func(r expiryRound) float64 { return r.vacuumWAL })),
		m.partitionMB, m.legacyMB, batchMs, singleMs, rows, days, rounds)
}

func benchEnvInt(t *testing.T, name string, def, least int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want an integer >= %d", name, s, least)
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of xs (not empty); xs is left unchanged.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// expiry holds the expiry measurements.
type expiry struct {
	rounds                []expiryRound
	maintainMs            float64
	partitionMB, legacyMB float64
}

// expiryRound is one day expired on both sides.
type expiryRound struct {
	dropMs, detachMs, dropTableMs, fsFreeMs float64
	deleteMs, vacuumMs                      float64
	dropWAL, deleteWAL, vacuumWAL           float64 // bytes of WAL written
}

func walLSN(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	var lsn string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

func walSince(ctx context.Context, t *testing.T, pool *pgxpool.Pool, from string) float64 {
	var n int64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint", from).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return float64(n)
}

func relBytes(ctx context.Context, t *testing.T, pool *pgxpool.Pool, rel string) int64 {
	var n int64
	if err := pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", rel).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// fsFree writes a file of size bytes in dir, syncs it, and times its
// truncation to zero: what the file system alone charges for freeing that
// much (PostgreSQL truncates a dropped relation's files at commit). It
// returns -1 if dir is not writable (a server on another machine).
func fsFree(t *testing.T, dir string, size int64) float64 {
	f, err := os.CreateTemp(dir, "fsfree-*")
	if err != nil {
		t.Logf("storage floor not measured: %v", err)
		return -1
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7) // not zeros, so nothing can skip writing them
	}
	for left := size; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), left)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	return ms(time.Since(t0))
}

func benchExpiry(ctx context.Context, t *testing.T, pool *pgxpool.Pool, rows, days, rounds int) expiry {
	tbl := Table{Scope: ScopeGlobal, Interval: Daily}
	var (
		hookMu sync.Mutex
		stepAt = map[Step]time.Time{}
	)
	e := newEngine(t, pool, tbl, WithStepHook(func(_ context.Context, s Step, _ string) error {
		hookMu.Lock()
		stepAt[s] = time.Now()
		hookMu.Unlock()
		return nil
	}))
	// Days d0 .. d0+days-1 hold the data; the window ends in the middle of
	// the last one. Enough empty days are premade that the later Maintain
	// has nothing to create and times the drop alone.
	d0 := time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC)
	now := d0.AddDate(0, 0, days-1).Add(12 * time.Hour)
	retention := time.Duration(days-1)*24*time.Hour + 12*time.Hour
	if _, err := e.Maintain(ctx, now, rounds+1, retention); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	// The legacy table, as it grew: rows appended in processing order, the
	// time-ordered ids (48-bit millisecond prefix, 80 pseudo-random bits)
	// spread over each day and processed 20ms after they were stamped (so
	// every id is processed on its own day, and the day's DELETE by
	// processed_at takes exactly the rows of the day's partition). Loaded
	// without its indexes, which are built afterwards (faster than
	// maintaining them row by row).
	t0 := time.Now()
	exec(`CREATE TABLE legacy_event (event_id uuid NOT NULL, consumer_group text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now())`)
	for d := range days {
		exec(`INSERT INTO legacy_event (event_id, consumer_group, processed_at)
			SELECT (encode(substring(int8send(ms) from 3 for 6), 'hex') || md5(g::text)::varchar(20))::uuid, 'bench',
			       to_timestamp(ms / 1000.0) + interval '20 milliseconds'
			  FROM generate_series(0, $2::bigint - 1) g, LATERAL (SELECT $1::bigint + (g * 86399000::bigint / $2::bigint) AS ms) x`,
			d0.AddDate(0, 0, d).UnixMilli(), rows)
	}
	exec(`ALTER TABLE legacy_event ADD CONSTRAINT legacy_event_pkey PRIMARY KEY (event_id)`)
	exec(`CREATE INDEX legacy_event_processed_at_idx ON legacy_event (processed_at)`)
	loadLegacy := time.Since(t0)
	// The same rows into our table, a day at a time.
	t0 = time.Now()
	for d := range days {
		from := d0.AddDate(0, 0, d)
		exec(`INSERT INTO processed_event SELECT * FROM legacy_event WHERE processed_at >= $1 AND processed_at < $2 ORDER BY processed_at`,
			from, from.AddDate(0, 0, 1))
	}
	loadOurs := time.Since(t0)
	t0 = time.Now()
	// Both settled the same way before timing: hint bits set, statistics
	// fresh, dirty pages flushed.
	for _, sql := range []string{`VACUUM ANALYZE legacy_event`, `VACUUM ANALYZE processed_event`, `CHECKPOINT`} {
		exec(sql)
	}
	t.Logf("loaded %d days x %d rows: legacy table %s, partitioned table %s, vacuum+checkpoint %s",
		days, rows, loadLegacy.Round(time.Millisecond), loadOurs.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for d := range rounds + 1 {
		p := Daily.partition("processed_event", d0.AddDate(0, 0, d))
		if !slices.ContainsFunc(st.Partitions, func(o ObservedPartition) bool { return o.Name == p.Name && o.Rows == int64(rows) }) {
			t.Fatalf("partition %s does not hold %d rows: %+v", p.Name, rows, st.Partitions)
		}
	}
	var m expiry
	partBytes := relBytes(ctx, t, pool, Daily.partition("processed_event", d0).Name)
	m.partitionMB = float64(partBytes) / (1 << 20)
	m.legacyMB = float64(relBytes(ctx, t, pool, "legacy_event")) / (1 << 20)
	var dataDir string
	if err := pool.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		t.Fatal(err)
	}
	if rows, err := pool.Query(ctx, `EXPLAIN DELETE FROM legacy_event WHERE processed_at < $1`, d0.AddDate(0, 0, 1)); err == nil {
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil {
			t.Logf("retention DELETE plan: %s", strings.Join(plan, " / "))
		}
	}

	for k := range rounds {
		var r expiryRound
		// Ours: the statements Maintain runs for an expired partition, timed alone.
		p := Daily.partition("processed_event", d0.AddDate(0, 0, k))
		conn, release, err := e.session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lsn := walLSN(ctx, t, pool)
		t0 := time.Now()
		err = e.detach(ctx, conn, p)
		detached := time.Now()
		if err == nil {
			err = e.dropDetached(ctx, conn, p)
		}
		drop := time.Since(t0)
		release()
		if err != nil {
			t.Fatal(err)
		}
		r.dropWAL = walSince(ctx, t, pool, lsn)
		detach := detached.Sub(t0)
		r.dropMs, r.detachMs, r.dropTableMs = ms(drop), ms(detach), ms(drop-detach)

		// The legacy retention job: delete what is older than the window,
		// then VACUUM, without which the space is not reused and the
		// indexes keep the dead entries.
		lsn = walLSN(ctx, t, pool)
		t0 = time.Now()
		tag, err := pool.Exec(ctx, `DELETE FROM legacy_event WHERE processed_at < $1`, d0.AddDate(0, 0, k+1))
		del := time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
		if tag.RowsAffected() != int64(rows) {
			t.Fatalf("DELETE removed %d rows, want %d", tag.RowsAffected(), rows)
		}
		r.deleteWAL = walSince(ctx, t, pool, lsn)
		lsn = walLSN(ctx, t, pool)
		t0 = time.Now()
		exec(`VACUUM legacy_event`)
		vac := time.Since(t0)
		r.vacuumWAL = walSince(ctx, t, pool, lsn)
		r.deleteMs, r.vacuumMs = ms(del), ms(vac)

		r.fsFreeMs = fsFree(t, filepath.Dir(dataDir), partBytes)
		// The next round starts from the same state: whatever the
		// round dirtied is on disk, as it would be a day later.
		exec(`CHECKPOINT`)
		m.rounds = append(m.rounds, r)
		t.Logf("round %d: expire one day (%d of %d rows): ours detach concurrently %.1f ms + drop table %.1f ms = %.1f ms, %.0f bytes WAL; "+
			"legacy DELETE %.0f ms (%.0f bytes WAL) + VACUUM %.0f ms (%.0f bytes WAL); truncating a %.0f MB file: %.1f ms",
			k+1, rows, days*rows, r.detachMs, r.dropTableMs, r.dropMs, r.dropWAL, r.deleteMs, r.deleteWAL, r.vacuumMs, r.vacuumWAL, m.partitionMB, r.fsFreeMs)
	}

	// The next day's expiry as the operator runs it: a whole Maintain
	// (advisory lock, catalog reads, plan, detach, drop, catalog reads).
	next := Daily.partition("processed_event", d0.AddDate(0, 0, rounds))
	clear(stepAt)
	t0 = time.Now()
	res, err := e.Maintain(ctx, now.AddDate(0, 0, rounds+1), 0, retention)
	maintain := time.Since(t0)
	if err != nil || len(res.Created) != 0 || !slices.Equal(names(res.Dropped), []string{next.Name}) {
		t.Fatalf("Maintain %d days later: created %v, dropped %v, err %v; want %s dropped alone", rounds+1, names(res.Created), names(res.Dropped), err, next.Name)
	}
	m.maintainMs = ms(maintain)
	t.Logf("a day later, the whole Maintain %s (its drop table step %s); partition %.0f MB with indexes, legacy table %.0f MB with indexes",
		maintain.Round(time.Microsecond), stepAt[StepDropped].Sub(stepAt[StepDetached]).Round(time.Microsecond), m.partitionMB, m.legacyMB)
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
	e, err := NewEngine(pool, tbl, WithoutFirstPartitions())
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
