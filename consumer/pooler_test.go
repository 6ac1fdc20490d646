package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestThroughPgBouncerTransactionMode runs the runtime through a real
// PgBouncer (Debian's 1.18) in transaction pooling mode, where a server
// session serves one transaction at a time and keeps no prepared statement
// across transactions: with DatabasePooler transaction, the transactional
// pipeline and the external pipeline each take every event's effect once
// with duplicates redelivered, and the claim function (the any-language
// contract) gives its verdicts through it. Without the setting the
// consumer stays not ready with an error that names it.
func TestThroughPgBouncerTransactionMode(t *testing.T) {
	e := newEnv(t, withPartitions(2))
	e.dumpLogsOnFailure(t)
	pooled := consumertest.StartPgBouncer(t, e.dsn)

	t.Run("without the setting", func(t *testing.T) {
		r := e.start(e.config(func(c *consumer.Config) { c.DatabaseURL = pooled }), nil)
		defer func() { _ = r.stop(t) }()
		waitNotReady(t, r.c, "CONSUMER_DATABASE_POOLER=transaction")
	})

	t.Run("transactional", func(t *testing.T) {
		r := e.start(e.config(func(c *consumer.Config) { c.DatabaseURL, c.DatabasePooler = pooled, consumer.PoolerTransaction }), nil)
		defer func() { _ = r.stop(t) }()
		ids := produceIDs(t, e, 200)
		for i, id := range ids[:50] { // redelivered copies
			e.kafka.Produce(t, e.topic, event(id, i%e.parts, ""))
		}
		waitFor(t, 60*time.Second, "every event to take effect through PgBouncer", func() (bool, string) {
			n := e.effectsOf(t, ids)
			return n == len(ids), fmt.Sprintf("%d of %d", n, len(ids))
		})
		e.waitCaughtUp(t, 30*time.Second)
		if rows, distinct := e.effects(t); rows != distinct {
			t.Fatalf("%d effect rows for %d ids: applied twice through the pooler", rows, distinct)
		}
	})

	t.Run("external", func(t *testing.T) {
		x := newXRecorder(t, 0)
		cfg := e.config(func(c *consumer.Config) {
			c.DatabaseURL, c.DatabasePooler = pooled, consumer.PoolerTransaction
			c.Group = "g-external"
		})
		r := e.startExternal(cfg, x.handle)
		defer func() { _ = r.stop(t) }()
		waitFor(t, 60*time.Second, "the external pipeline to record all 200 ids", func() (bool, string) {
			var n int
			if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.table.WithDefaults().String()+` WHERE consumer_group = 'g-external'`).Scan(&n); err != nil {
				return false, err.Error()
			}
			return n == 200, fmt.Sprintf("%d recorded", n)
		})
		time.Sleep(time.Second) // the copies come last in their partitions
		// (The recorder's per-key check does not apply: these events have
		// no key and two partitions, which may each call at once.)
		calls, _ := x.snapshot()
		if len(calls) != 200 {
			t.Errorf("%d ids called, want 200", len(calls))
		}
		for id, n := range calls {
			if n != 1 {
				t.Errorf("id %s called %d times", id, n)
			}
		}
	})

	t.Run("claim function", func(t *testing.T) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, pooled+"&default_query_exec_mode=simple_protocol")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		fn := e.table.ClaimFunction()
		id := uuid.Must(uuid.NewV7())
		for i, want := range []string{dedup.VerdictNew, dedup.VerdictDuplicate} {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var verdict string
			if err := tx.QueryRow(ctx, `SELECT verdict FROM `+fn+`($1::uuid[], $2)`, "{"+id.String()+"}", "g-any").Scan(&verdict); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if verdict != want {
				t.Errorf("claim %d through PgBouncer: %q, want %q", i+1, verdict, want)
			}
		}
	})
}
