package consumertest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

func TestPostgresCreatesTableAndRow(t *testing.T) {
	ctx := context.Background()
	pool := consumertest.NewPool(t)

	if _, err := pool.Exec(ctx, `CREATE TABLE smoke (id int PRIMARY KEY, note text NOT NULL)`); err != nil {
		t.Fatalf("create table: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO smoke VALUES (1, 'hello')`); err != nil {
		t.Fatalf("insert: %v", err)
	}
	var note, fsync string
	if err := pool.QueryRow(ctx, `SELECT note FROM smoke WHERE id = 1`).Scan(&note); err != nil {
		t.Fatalf("select: %v", err)
	}
	if note != "hello" {
		t.Fatalf("note = %q, want hello", note)
	}
	// The harness promises production durability settings.
	if err := pool.QueryRow(ctx, `SHOW fsync`).Scan(&fsync); err != nil {
		t.Fatalf("show fsync: %v", err)
	}
	if fsync != "on" && os.Getenv(consumertest.EnvDatabaseURL) == "" {
		t.Fatalf("fsync = %q, want on", fsync)
	}
}

func TestPostgresDatabasesAreIsolated(t *testing.T) {
	ctx := context.Background()
	a, b := consumertest.NewPool(t), consumertest.NewPool(t)
	if _, err := a.Exec(ctx, `CREATE TABLE only_in_a (x int)`); err != nil {
		t.Fatal(err)
	}
	_, err := b.Exec(ctx, `SELECT * FROM only_in_a`)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("table leaked across test databases: err = %v", err)
	}
}

func TestPostgresRestartKeepsData(t *testing.T) {
	if os.Getenv(consumertest.EnvDatabaseURL) != "" {
		t.Skip("restart needs the throwaway cluster")
	}
	// A private cluster, so restarting it cannot disturb other tests.
	pg, err := consumertest.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pg.Stop() }()
	ctx := context.Background()
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, pg.URL("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(`CREATE TABLE durable (x int); INSERT INTO durable VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := exec(`SELECT 1`); err == nil {
		t.Fatal("query succeeded against a killed server")
	}
	if err := pg.Start(); err != nil {
		t.Fatalf("restart after kill: %v", err)
	}
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var x int
	if err := conn.QueryRow(ctx, `SELECT x FROM durable`).Scan(&x); err != nil || x != 42 {
		t.Fatalf("after crash recovery: x=%d err=%v", x, err)
	}
}

// TestKafkaGroupConsumeCommitAndResume produces, consumes in a group with a
// manual offset commit, stops the reader, and checks that a new reader in the
// same group resumes right after the committed offset.
func TestKafkaGroupConsumeCommitAndResume(t *testing.T) {
	k := consumertest.NewKafka(t)
	const topic, group = "smoke", "smoke-group"
	k.MustCreateTopic(t, topic, 1)

	var msgs []kafka.Message
	for i := range 10 {
		msgs = append(msgs, kafka.Message{Value: []byte(fmt.Sprintf("m%d", i))})
	}
	k.Produce(t, topic, msgs...)

	newReader := func() *kafka.Reader {
		return kafka.NewReader(kafka.ReaderConfig{
			Brokers:           k.Brokers(),
			GroupID:           group,
			Topic:             topic,
			CommitInterval:    0, // synchronous commits: auto-commit is off
			SessionTimeout:    time.Second,
			RebalanceTimeout:  time.Second,
			HeartbeatInterval: 100 * time.Millisecond,
			MaxWait:           100 * time.Millisecond,
			StartOffset:       kafka.FirstOffset,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	r := newReader()
	var last kafka.Message
	for i := range 4 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
		if got, want := string(m.Value), fmt.Sprintf("m%d", i); got != want {
			t.Fatalf("message %d = %q, want %q", i, got, want)
		}
		last = m
	}
	// Fetch m4 but don't commit it: it must come back after the restart.
	if _, err := r.FetchMessage(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.CommitMessages(ctx, last); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	r2 := newReader()
	defer r2.Close()
	m, err := r2.FetchMessage(ctx)
	if err != nil {
		t.Fatalf("fetch after restart: %v", err)
	}
	if string(m.Value) != "m4" || m.Offset != 4 {
		t.Fatalf("resumed at %q (offset %d), want m4 at offset 4", m.Value, m.Offset)
	}
}

func TestKafkaCreateTopicWithRetention(t *testing.T) {
	k := consumertest.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.CreateTopic(ctx, "retained", 3, map[string]string{"retention.ms": "3600000"}); err != nil {
		t.Fatal(err)
	}
	// Creating it again is not an error: seeding is idempotent.
	if err := k.CreateTopic(ctx, "retained", 3, nil); err != nil {
		t.Fatalf("re-create: %v", err)
	}
	conn, err := kafka.DialContext(ctx, "tcp", k.Brokers()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions("retained")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 3 {
		t.Fatalf("partitions = %d, want 3", len(parts))
	}
}
