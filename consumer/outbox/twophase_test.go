package outbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEmit_InATwoPhaseCommitTransaction: PostgreSQL refuses to PREPARE a
// transaction that sent NOTIFY, which the emit function does; with the
// transaction's setting idempotency_outbox.notify off it sends none, the
// XA/JTA transaction prepares and commits, and the relay publishes the
// event by polling, once COMMIT PREPARED has made it visible (not while it
// is only prepared).
func TestEmit_InATwoPhaseCommitTransaction(t *testing.T) {
	ctx := testCtx(t)
	pg, err := consumertest.StartPostgres(consumertest.WithSetting("max_prepared_transactions", "4"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	pool, err := pgxpool.New(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tbl := outbox.Table{Name: "outbox"}
	if err := outbox.Ensure(ctx, pool, tbl, testOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Maintain(ctx, pool, tbl, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	// As it is: the NOTIFY makes PREPARE fail (and roll the transaction back).
	if _, err := conn.Exec(ctx, `BEGIN; SELECT public.outbox_emit('orders', 'k'::bytea, 'refused'::bytea)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE TRANSACTION 'with-notify'`); err == nil || !strings.Contains(err.Error(), "NOTIFY") {
		t.Fatalf("PREPARE after an emit with NOTIFY: %v, want PostgreSQL's refusal naming NOTIFY", err)
	}
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil { // PREPARE's failure ended the transaction; ROLLBACK only warns
		t.Fatal(err)
	}

	e := &relayEnv{pool: pool, tbl: tbl, kafka: consumertest.NewKafka(t)}
	e.kafka.MustCreateTopic(t, "orders", 1)
	r := e.start(t, func(c *outbox.Config) { c.PollInterval = 200 * time.Millisecond })
	waitFor(t, 20*time.Second, "the relay to own the stream", r.owner)

	var id string
	if _, err := conn.Exec(ctx, `BEGIN; SET LOCAL idempotency_outbox.notify = off`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT public.outbox_emit('orders', 'k'::bytea, 'two-phase'::bytea)::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE TRANSACTION 'xa-1'`); err != nil {
		t.Fatalf("PREPARE after an emit with idempotency_outbox.notify off: %v", err)
	}
	time.Sleep(time.Second) // five polls: a prepared transaction is not committed
	if n := testutil.ToFloat64(r.metrics.Published); n != 0 {
		t.Fatalf("published %v rows of a transaction that is only prepared", n)
	}
	if _, err := pool.Exec(ctx, `COMMIT PREPARED 'xa-1'`); err != nil {
		t.Fatal(err)
	}
	if got := e.readTopic(t, "orders", 1, 1, 20*time.Second); len(got) != 1 || got[0].id != id {
		t.Fatalf("published %v, want the prepared transaction's event %s (by polling)", got, id)
	}
}
