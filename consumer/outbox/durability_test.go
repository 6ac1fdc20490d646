package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEmit_CommitsSynchronouslyEvenWhenTheSessionDoesNot (review finding
// 3): with synchronous_commit off, a commit is visible to other sessions
// before its WAL is flushed; the relay would publish the event at once, and
// a crash would lose the transaction whose event is in Kafka. The emit
// function makes its transaction commit synchronously: the event's
// transaction survives the crash (the wal writer is slowed to 10 s here, so
// an asynchronous commit would surely be lost).
func TestEmit_CommitsSynchronouslyEvenWhenTheSessionDoesNot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pg, err := consumertest.StartPostgres(consumertest.WithSetting("wal_writer_delay", "10000ms"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pg.Stop() }()
	url := pg.URL("postgres")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tbl := outbox.Table{Name: "outbox"}
	if err := outbox.Ensure(ctx, pool, tbl, testOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Maintain(ctx, pool, tbl, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "orders", 1)
	e := &relayEnv{pool: pool, tbl: tbl, kafka: k}
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(t, func(c *outbox.Config) { c.ConnConfig = cc; c.TakeoverDelay = 2*c.PublishTimeout + 100*time.Millisecond })
	waitFor(t, 20*time.Second, "the relay to own the stream", r.owner)
	time.Sleep(3 * time.Second) // past the takeover delay

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	var id uuid.UUID
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		id, err = outbox.Emit(ctx, tx, tbl, outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("charge 100")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the row published", func() bool { return testutil.ToFloat64(r.metrics.Published) == 1 })
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(context.Background())
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	check, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close(ctx)
	var n int
	if err := check.QueryRow(ctx, `SELECT count(*) FROM public.outbox WHERE event_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	got := e.readTopic(t, "orders", 1, 1, 10*time.Second)
	t.Logf("after the crash: rows with the event's id %d; records in Kafka %v", n, got)
	if len(got) != 1 || got[0].id != id.String() {
		t.Fatalf("published %v, want the event %s", got, id)
	}
	if n != 1 {
		t.Errorf("event %s was published, and its transaction does not exist after crash recovery (a phantom event)", id)
	}
}
