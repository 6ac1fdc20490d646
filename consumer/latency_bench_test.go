package consumer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestBenchLatency measures end-to-end latency at a steady low rate: from
// the producer's send (its time, carried in the event) to the commit of the
// effect's transaction (PostgreSQL's commit timestamp of the business row,
// track_commit_timestamp=on), for the runtime with the SQL sink and its
// default batch settings, and for the source design's per-message pattern
// (BEGIN, dedup insert, the statement, COMMIT, offset commit) on the same
// broker and database, measured the same way in the same run. One line per
// rate:
//
//	RESULT latency rate=... p50_ms=... p99_ms=... permsg_p50_ms=... permsg_p99_ms=... p99_vs_permsg=... pass=...
//
// Targets: p50 <= 10 ms and p99 <= 2 x the per-message p99 + 5 ms.
func TestBenchLatency(t *testing.T) {
	if os.Getenv("CONSUMER_BENCH_LATENCY") == "" {
		t.Skip("set CONSUMER_BENCH_LATENCY=1 to run the benchmark")
	}
	seconds := 10
	if s := os.Getenv("CONSUMER_BENCH_LATENCY_SECONDS"); s != "" {
		seconds, _ = strconv.Atoi(s)
	}
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
	if _, err := admin.Exec(ctx, "CREATE DATABASE latency"); err != nil {
		t.Fatal(err)
	}
	_ = admin.Close(ctx)
	pool, err := pgxpool.New(ctx, pg.URL("latency"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := dedup.Table{Interval: dedup.Daily}
	createTables(t, pool, table)
	if _, err := pool.Exec(ctx, `CREATE TABLE lat (run text NOT NULL, event_id uuid NOT NULL, sent_ns bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	k := consumertest.NewKafka(t)
	const parts = 4

	for _, rate := range []int{50, 500} {
		n := rate * seconds
		rt := latencyRun(t, k, pool, table, fmt.Sprintf("rt%d", rate), rate, n, parts, false)
		pm := latencyRun(t, k, pool, table, fmt.Sprintf("pm%d", rate), rate, n, parts, true)
		p50, p99 := percentile(rt, 0.50), percentile(rt, 0.99)
		pm50, pm99 := percentile(pm, 0.50), percentile(pm, 0.99)
		pass := p50 <= 10 && p99 <= 2*pm99+5
		fmt.Printf("RESULT latency rate=%d events=%d p50_ms=%.1f p99_ms=%.1f permsg_p50_ms=%.1f permsg_p99_ms=%.1f p99_vs_permsg=%.2f pass=%t (targets: p50_ms<=10, p99_ms<=2*permsg_p99_ms+5)\n",
			rate, n, p50, p99, pm50, pm99, p99/pm99, pass)
	}
}

// latencyRun produces n events at rate per second to a topic of its own,
// consumed by the runtime (or the per-message pattern), and returns each
// event's send-to-commit latency in milliseconds.
func latencyRun(t *testing.T, k *consumertest.Kafka, pool *pgxpool.Pool, table dedup.Table, run string, rate, n, parts int, perMsg bool) []float64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic := "lat-" + run
	k.MustCreateTopic(t, topic, parts)
	k.MustCreateTopic(t, topic+".dlq", 1)
	stmt := fmt.Sprintf(`INSERT INTO lat (run, event_id, sent_ns) VALUES ('%s', $1, ($2::jsonb->>'sentNs')::bigint)`, run)
	handler, err := sink.SQL(sink.SQLConfig{Statement: stmt})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	if perMsg {
		go func() { done <- latencyPerMessage(ctx, k.Brokers(), pool, table, topic, handler, n) }()
	} else {
		cfg := consumer.Config{
			Brokers: k.Brokers(), Topic: topic, Group: run, Pool: pool, Table: table,
			Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
			SessionTimeout: 6 * time.Second, HeartbeatInterval: time.Second,
			StartOffset: consumer.StartEarliest,
		}
		c, err := consumer.New(cfg, handler)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- c.Run(ctx) }()
		waitReady(t, c)
	}
	// Let the reader reach the end of the empty topic before the clock runs.
	time.Sleep(2 * time.Second)
	w := &kafka.Writer{Addr: kafka.TCP(k.Brokers()...), Topic: topic, Balancer: &kafka.RoundRobin{},
		BatchSize: 1, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireOne}
	defer w.Close()
	interval := time.Second / time.Duration(rate)
	next := time.Now()
	for range n {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		next = next.Add(interval)
		id := uuid.Must(uuid.NewV7())
		v := fmt.Sprintf(`{"eventId":%q,"type":"latency","sentNs":%d}`, id, time.Now().UnixNano())
		if err := w.WriteMessages(ctx, kafka.Message{Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	var got int
	deadline := time.Now().Add(2 * time.Minute)
	for got < n {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM lat WHERE run = $1`, run).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d effects after 2 minutes", run, got, n)
		}
		select {
		case err := <-done:
			t.Fatalf("%s: the consumer stopped: %v", run, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("%s: the consumer: %v", run, err)
	}
	rows, err := pool.Query(context.Background(), `SELECT (extract(epoch FROM pg_catalog.pg_xact_commit_timestamp(xmin)) * 1e9)::bigint - sent_ns FROM lat WHERE run = $1`, run)
	if err != nil {
		t.Fatal(err)
	}
	lat, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (float64, error) {
		var ns int64
		err := r.Scan(&ns)
		return float64(ns) / 1e6, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != n {
		t.Fatalf("%s: %d effects, want %d (one per event)", run, len(lat), n)
	}
	return lat
}

// latencyPerMessage is the per-message pattern of the source design, as in
// perMessage, on topic, until ctx ends or n records are done.
func latencyPerMessage(ctx context.Context, brokers []string, pool *pgxpool.Pool, table dedup.Table, topic string, h consumer.Handler, n int) error {
	ins, err := dedup.NewInserter(table, "permsg-"+topic)
	if err != nil {
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: topic, GroupID: "permsg-" + topic, StartOffset: kafka.FirstOffset,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond, CommitInterval: 0,
	})
	defer r.Close()
	for range n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return nil // ended
		}
		id, err := uuid.Parse(strings.Split(string(m.Value), `"`)[3])
		if err != nil {
			return err
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		res, err := ins.Insert(ctx, tx, []uuid.UUID{id})
		if err != nil {
			return err
		}
		if res.Fresh[0] {
			ev := &consumer.Event{ID: id, Payload: m.Value, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
			if err := h(consumer.ContextWithEvent(ctx, ev), tx, ev); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func percentile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
