package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// TestBenchRollout measures what a rolling restart costs: three cmd/consumer
// replicas (SQL sink, default settings) on an 8-partition topic at a steady
// 200 events/s, each restarted in turn with SIGTERM (the next once the
// restarted one is ready, as a Deployment's rolling update does), while the
// producer keeps going. It reports the worst and the 99th percentile
// send-to-commit latency over the whole run (PostgreSQL commit timestamps),
// and fails if an event is lost or applied twice:
//
//	RESULT rollout replicas=3 rate=200 events=... max_e2e_ms=... p99_ms=... restart_s=... lost=0 duplicates_applied=0 pass=...
//
// Target: max_e2e_ms <= 3000.
func TestBenchRollout(t *testing.T) {
	if os.Getenv("CONSUMER_BENCH_ROLLOUT") == "" {
		t.Skip("set CONSUMER_BENCH_ROLLOUT=1 to run the benchmark")
	}
	const (
		replicas = 3
		parts    = scaleParts // waitGroupStable counts them
		rate     = 200
	)
	ctx := context.Background()
	pg, err := consumertest.StartPostgres(consumertest.WithSetting("track_commit_timestamp", "on"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE rollout"); err != nil {
		t.Fatal(err)
	}
	_ = admin.Close(ctx)
	dsn := pg.URL("rollout")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	createTables(t, pool, dedup.Table{Interval: dedup.Daily})
	if _, err := pool.Exec(ctx, `CREATE TABLE roll (event_id uuid NOT NULL, sent_ns bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "roll", parts)
	k.MustCreateTopic(t, "roll.dlq", 1)
	bin := filepath.Join(t.TempDir(), "consumer")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/consumer").CombinedOutput(); err != nil {
		t.Fatalf("building cmd/consumer: %v\n%s", err, out)
	}

	var mu sync.Mutex
	procs := make([]*exec.Cmd, replicas)
	start := func(i int) {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(),
			envvars.Brokers+"="+strings.Join(k.Brokers(), ","),
			envvars.Topic+"=roll", envvars.Group+"=roll",
			envvars.DatabaseURL+"="+dsn,
			envvars.ListenAddr+"=127.0.0.1:0", envvars.LogLevel+"=warn",
			envvars.Sink+"=sql",
			envvars.SinkSQLStatement+"=INSERT INTO roll (event_id, sent_ns) VALUES ($1, ($2::jsonb->>'sentNs')::bigint)",
		)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				t.Logf("replica %d: %s", i, sc.Text())
			}
		}()
		mu.Lock()
		procs[i] = cmd
		mu.Unlock()
	}
	for i := range replicas {
		start(i)
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range procs {
			_ = p.Process.Kill()
		}
	}()
	waitGroupStable(t, k.Brokers(), "roll", replicas, time.Minute)

	// The producer: a steady rate until the rollout is over and 5 s more.
	pctx, stopProducing := context.WithCancel(ctx)
	produced := make(chan int, 1)
	go func() {
		w := &kafka.Writer{Addr: kafka.TCP(k.Brokers()...), Topic: "roll", Balancer: &kafka.RoundRobin{},
			BatchSize: 1, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireOne}
		defer w.Close()
		n := 0
		next := time.Now()
		for pctx.Err() == nil {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(time.Second / rate)
			id := uuid.Must(uuid.NewV7())
			v := fmt.Sprintf(`{"eventId":%q,"type":"rollout","sentNs":%d}`, id, time.Now().UnixNano())
			if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(id.String()), Value: []byte(v)}); err != nil {
				t.Errorf("producing: %v", err)
				break
			}
			n++
		}
		produced <- n
	}()
	time.Sleep(5 * time.Second)
	rollStart := time.Now()
	for i := range replicas {
		mu.Lock()
		p := procs[i]
		mu.Unlock()
		_ = p.Process.Signal(syscall.SIGTERM)
		if err := p.Wait(); err != nil {
			t.Errorf("replica %d after SIGTERM: %v", i, err)
		}
		start(i)
		waitGroupStable(t, k.Brokers(), "roll", replicas, time.Minute)
	}
	restart := time.Since(rollStart)
	time.Sleep(5 * time.Second)
	stopProducing()
	n := <-produced
	waitGroupDone(t, k.Brokers(), "roll", "roll", parts, 2*time.Minute)

	var rows, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM roll`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	lost, twice := n-distinct, rows-distinct
	lat, err := pgx.CollectRows(must(pool.Query(ctx, `SELECT (extract(epoch FROM pg_catalog.pg_xact_commit_timestamp(xmin)) * 1e9)::bigint - sent_ns FROM roll`)),
		func(r pgx.CollectableRow) (float64, error) {
			var ns int64
			err := r.Scan(&ns)
			return float64(ns) / 1e6, err
		})
	if err != nil {
		t.Fatal(err)
	}
	maxMs := slices.Max(append(lat, 0))
	p99 := percentile(lat, 0.99)
	pass := maxMs <= 3000 && lost == 0 && twice == 0
	fmt.Printf("RESULT rollout replicas=%d rate=%d events=%d max_e2e_ms=%.0f p99_ms=%.1f restart_s=%.1f lost=%d duplicates_applied=%d pass=%t (target: max_e2e_ms<=3000)\n",
		replicas, rate, n, maxMs, p99, restart.Seconds(), lost, twice, pass)
	if lost != 0 || twice != 0 {
		t.Fatalf("%d events lost, %d applied twice", lost, twice)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
