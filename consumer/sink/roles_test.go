package sink_test

import (
	"context"
	"log/slog"
	"strings"
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
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestSQLSinkAsConsumerRole runs the whole runtime with the SQL sink as the
// consumer's own role, on a table the operator's role made and granted with
// dedup.Engine.GrantConsumer: the start-up checks (table, scope, positions,
// durability), the batched insert, a duplicate skipped, a bad event
// dead-lettered and its dedup row taken back (Forget), the positions
// recorded. Nothing in the log says a privilege was missing.
func TestSQLSinkAsConsumerRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "events", 1)
	k.MustCreateTopic(t, "events.dlq", 1)
	dsn := consumertest.DatabaseURL(t)
	owner := consumertest.NewRole(t, dsn, "operator")
	role := consumertest.NewRole(t, dsn, "consumer")
	admin := pool(t, dsn)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA app AUTHORIZATION "+pgx.Identifier{owner.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	ownerDB := pool(t, owner.URL)
	tbl := dedup.Table{Schema: "app"}
	eng, err := dedup.NewEngine(ownerDB, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, "test-owner"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Maintain(ctx, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.GrantConsumer(ctx, role.Name, "g"); err != nil {
		t.Fatal(err)
	}
	// The sink's own table: the application's, granted by whoever owns it.
	if _, err := ownerDB.Exec(ctx, `CREATE TABLE app.ledger (event_id uuid PRIMARY KEY, amount numeric NOT NULL);
GRANT INSERT ON app.ledger TO `+pgx.Identifier{role.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	scfg := sink.SQLConfig{Statement: `INSERT INTO app.ledger (event_id, amount) VALUES ($1, ($2::jsonb->>'amount')::numeric)`}
	conn, err := pgx.Connect(ctx, role.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := scfg.Check(ctx, conn); err != nil {
		t.Fatalf("the sink's statement check as the consumer's role: %v", err)
	}
	_ = conn.Close(ctx)
	h, err := sink.SQL(scfg)
	if err != nil {
		t.Fatal(err)
	}

	ids := []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())}
	bad := uuid.Must(uuid.NewV7())
	msg := func(id uuid.UUID, amount string) kafka.Message {
		return kafka.Message{Value: []byte(`{"eventId":"` + id.String() + `","amount":` + amount + `}`)}
	}
	k.Produce(t, "events", msg(ids[0], "1"), msg(ids[1], "2"), msg(ids[0], "1"), msg(bad, `"not a number"`), msg(ids[2], "3"))

	logs := &consumertest.SyncBuffer{}
	cfg := consumer.Config{
		Brokers: k.Brokers(), Topic: "events", Group: "g", DatabaseURL: role.URL, Table: tbl,
		BatchWait: 10 * time.Millisecond, SessionTimeout: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		HandlerBackoff: 10 * time.Millisecond, HandlerBackoffMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	c, err := consumer.New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() {
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs.String())
		}
	}()
	var next int64
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		err := admin.QueryRow(ctx, `SELECT next_offset FROM app.processed_event_offsets WHERE consumer_group = 'g' AND topic = 'events' AND kafka_partition = 0`).Scan(&next)
		if err == nil && next == 5 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run as the consumer's role: %v", err)
	}
	if next != 5 {
		t.Fatalf("position of g: %d, want 5 (all five records done)", next)
	}
	var ledger, dedupRows, badRows int
	if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM app.ledger), (SELECT count(*) FROM app.processed_event WHERE consumer_group = 'g'),
	        (SELECT count(*) FROM app.processed_event WHERE event_id = $1)`, bad).Scan(&ledger, &dedupRows, &badRows); err != nil {
		t.Fatal(err)
	}
	if ledger != 3 || dedupRows != 3 || badRows != 0 {
		t.Errorf("ledger %d rows, dedup %d rows, bad event's dedup rows %d; want 3, 3, 0 (the duplicate skipped, the bad one dead-lettered and forgotten)", ledger, dedupRows, badRows)
	}
	if dlq := readDLQ(t, k.Brokers(), 1, 10*time.Second); len(dlq) != 1 {
		t.Errorf("%d dead letters, want 1", len(dlq))
	}
	for _, s := range []string{"permission denied", "42501", "could not read the database's durability settings", "waiting for dependencies"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the log says %q", s)
		}
	}
}

// TestConsumerWaitsForItsGrants: a consumer whose role has the grants of
// another group (so its rows are refused by row-level security) reports not
// ready with what is missing instead of starting and failing every batch;
// once the owner grants its group it goes on by itself.
func TestConsumerWaitsForItsGrants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "events", 1)
	k.MustCreateTopic(t, "events.dlq", 1)
	dsn := consumertest.DatabaseURL(t)
	owner := consumertest.NewRole(t, dsn, "operator")
	role := consumertest.NewRole(t, dsn, "consumer")
	admin := pool(t, dsn)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA app AUTHORIZATION "+pgx.Identifier{owner.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	tbl := dedup.Table{Schema: "app"}
	eng, err := dedup.NewEngine(pool(t, owner.URL), tbl)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, "test-owner"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Maintain(ctx, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.GrantConsumer(ctx, role.Name, "another-group"); err != nil {
		t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	k.Produce(t, "events", kafka.Message{Value: []byte(`{"eventId":"` + id.String() + `"}`)})
	logs := &consumertest.SyncBuffer{}
	cfg := consumer.Config{
		Brokers: k.Brokers(), Topic: "events", Group: "g", DatabaseURL: role.URL, Table: tbl,
		BatchWait: 10 * time.Millisecond, SessionTimeout: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		RetryBackoffMax: 200 * time.Millisecond,
		Logger:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	var calls atomic.Int64
	c, err := consumer.New(cfg, func(context.Context, pgx.Tx, *consumer.Event) error { calls.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs.String())
		}
	}()
	want := `may not run the consumer of group \"g\": row-level security on app.processed_event and no policy for this role and group`
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("the log does not say what the role lacks (%s)", want)
	}
	if strings.Contains(logs.String(), "joined generation") || calls.Load() != 0 {
		t.Fatalf("the consumer joined the group (%d handler calls) without its grants", calls.Load())
	}
	if _, err := eng.GrantConsumer(ctx, role.Name, "g"); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d handler calls after the grant, want 1", calls.Load())
	}
}

func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
