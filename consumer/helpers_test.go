package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

// env is one test's broker, database, topic and dedup table.
type env struct {
	t       testing.TB
	kafka   *consumertest.Kafka
	dsn     string
	pool    *pgxpool.Pool
	topic   string
	dlq     string
	group   string
	table   dedup.Table
	parts   int
	calls   atomic.Int64 // handler calls that succeeded
	logBuf  *consumertest.SyncBuffer
	failIDs sync.Map // uuid.UUID -> error to return
}

type envOpt func(*env)

func withPartitions(n int) envOpt { return func(e *env) { e.parts = n } }

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, parts: 1, topic: "events", dlq: "events.dlq", group: "g1", logBuf: &consumertest.SyncBuffer{}}
	for _, o := range opts {
		o(e)
	}
	e.kafka = consumertest.NewKafka(t)
	e.kafka.MustCreateTopic(t, e.topic, e.parts)
	e.kafka.MustCreateTopic(t, e.dlq, 1)
	e.dsn = consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.pool = pool
	e.table = dedup.Table{Scope: dedup.ScopeConsumerGroup, Interval: dedup.Daily}
	createTables(t, pool, e.table)
	return e
}

// createTables makes the dedup table with partitions from 3 days back to 4
// days ahead, and the business table "effect" with no unique key, so that a
// double effect shows as two rows.
func createTables(t testing.TB, pool *pgxpool.Pool, table dedup.Table) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := dedup.NewEngine(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Maintain(ctx, time.Now(), 4, 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effect (
		seq bigserial PRIMARY KEY, event_id uuid NOT NULL, part int NOT NULL, off bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// handler records one effect row per call and fails for ids in failIDs.
func (e *env) handler(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
	if v, ok := e.failIDs.Load(ev.ID); ok {
		return v.(error)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effect (event_id, part, off) VALUES ($1, $2, $3)`, ev.ID, ev.Partition, ev.Offset); err != nil {
		return err
	}
	e.calls.Add(1)
	return nil
}

func (e *env) config(mods ...func(*consumer.Config)) consumer.Config {
	cfg := consumer.Config{
		Brokers:            e.kafka.Brokers(),
		Topic:              e.topic,
		Group:              e.group,
		DatabaseURL:        e.dsn,
		Table:              e.table,
		BatchSize:          100,
		BatchWait:          20 * time.Millisecond,
		SessionTimeout:     2 * time.Second,
		HeartbeatInterval:  200 * time.Millisecond,
		RebalanceTimeout:   5 * time.Second,
		HandlerMaxAttempts: 3,
		HandlerBackoff:     time.Millisecond,
		HandlerBackoffMax:  5 * time.Millisecond,
		RetryBackoffMax:    500 * time.Millisecond,
		ShutdownTimeout:    10 * time.Second,
		Logger:             slog.New(slog.NewTextHandler(e.logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, m := range mods {
		m(&cfg)
	}
	return cfg
}

// running is a consumer running in the background.
type running struct {
	c      *consumer.Consumer
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start(cfg consumer.Config, h consumer.Handler, hooks ...func(*consumer.Consumer)) *running {
	e.t.Helper()
	if h == nil {
		h = e.handler
	}
	c, err := consumer.New(cfg, h)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, hk := range hooks {
		hk(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	e.t.Cleanup(func() { _ = r.stop(e.t) })
	return r
}

// stop shuts the consumer down gracefully and returns Run's error.
func (r *running) stop(t testing.TB) error {
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("consumer did not stop within 30s")
		return nil
	}
}

// wait returns Run's error, or fails after d.
func (r *running) wait(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		close(r.done)
		return err
	case <-time.After(d):
		t.Fatalf("consumer still running after %v", d)
		return nil
	}
}

func newID(t testing.TB) uuid.UUID {
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// event builds a JSON envelope message for id on a partition.
func event(id uuid.UUID, partition int, extra string) kafka.Message {
	v := fmt.Sprintf(`{"eventId":%q,"type":"test"%s}`, id, extra)
	return kafka.Message{Partition: partition, Value: []byte(v)}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s (last: %s)", d, what, last)
}

// committed returns the group's committed offset per partition (-1 = none).
func (e *env) committed(ctx context.Context) (map[int]int64, error) {
	return consumertest.CommittedOffsets(ctx, e.kafka.Brokers(), e.group, e.topic, e.parts)
}

// highWater returns the end offset of each partition of topic.
func (e *env) highWater(ctx context.Context, topic string, parts int) (map[int]int64, error) {
	return consumertest.EndOffsets(ctx, e.kafka.Brokers(), topic, parts)
}

// waitCaughtUp waits until the group has committed every partition's end.
func (e *env) waitCaughtUp(t testing.TB, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, d, "committed offsets to reach the end of every partition", func() (bool, string) {
		hw, err := e.highWater(ctx, e.topic, e.parts)
		if err != nil {
			return false, err.Error()
		}
		co, err := e.committed(ctx)
		if err != nil {
			return false, err.Error()
		}
		for p, end := range hw {
			if co[p] != end && !(end == 0 && co[p] < 0) {
				return false, fmt.Sprintf("committed %v, end %v", co, hw)
			}
		}
		return true, ""
	})
}

// effects returns the number of effect rows and of distinct event ids.
func (e *env) effects(t testing.TB) (rows, distinct int) {
	t.Helper()
	err := e.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT event_id) FROM effect`).Scan(&rows, &distinct)
	if err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

// readAll reads every record of a topic partition from the beginning.
func readAll(t testing.TB, brokers []string, topic string, partition int, want int, wait time.Duration) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partition, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []kafka.Message
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for len(out) < want {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			t.Fatalf("reading %s: %v", topic, err)
		}
		out = append(out, m)
	}
	return out
}

func header(m kafka.Message, key string) string {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == key {
			return string(m.Headers[i].Value)
		}
	}
	return ""
}

// dumpLogsOnFailure prints the consumer log when the test fails (or always
// with CONSUMER_TEST_LOGS=1).
func (e *env) dumpLogsOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CONSUMER_TEST_LOGS") != "" {
			s := e.logBuf.String()
			if len(s) > 20000 {
				s = "...\n" + s[len(s)-20000:]
			}
			t.Logf("consumer log:\n%s", s)
		}
	})
}

var _ = strings.Contains

func newPoolFor(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
