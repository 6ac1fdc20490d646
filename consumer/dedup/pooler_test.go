package dedup

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// TestMaintenanceRefusesTransactionPooler: the maintainer's session advisory
// lock, its SETs and DETACH CONCURRENTLY outlive a transaction, which a
// pooler in transaction mode does not keep: the lock would stay on (or be
// released from) a server connection that the pooler hands to another
// client. Through PgBouncer in transaction mode the engine refuses with a
// *TransactionPoolerError before it takes any lock; through PgBouncer in
// session mode (a server connection pinned to the client) and directly it
// works.
func TestMaintenanceRefusesTransactionPooler(t *testing.T) {
	direct := consumertest.DatabaseURL(t)
	tbl := Table{Schema: "public", Name: "pooled_event", Scope: ScopeConsumerGroup, Interval: Daily}
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testCtx(t)
			pool, err := pgxpool.New(ctx, consumertest.StartPgBouncerMode(t, direct, mode))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			e, err := NewEngine(pool, tbl, WithoutFirstPartitions())
			if err != nil {
				t.Fatal(err)
			}
			err = e.EnsureTable(ctx, testOwner)
			var pe *TransactionPoolerError
			switch mode {
			case "transaction":
				if !errors.As(err, &pe) {
					t.Fatalf("EnsureTable through PgBouncer in transaction mode: %v, want a *TransactionPoolerError", err)
				}
				if msg := err.Error(); !strings.Contains(msg, "transaction mode") || !strings.Contains(msg, "directly") {
					t.Errorf("error %q does not say what is wrong and what to do", msg)
				}
				// Refused before any DDL: the table is not there.
				var exists bool
				if err := poolFor(t, direct).QueryRow(ctx, `SELECT to_regclass('public.pooled_event') IS NOT NULL`).Scan(&exists); err != nil {
					t.Fatal(err)
				}
				if exists {
					t.Error("the table was created through the transaction pooler before the refusal")
				}
			case "session":
				if err != nil {
					t.Fatalf("EnsureTable through PgBouncer in session mode: %v", err)
				}
			}
		})
	}
	t.Run("direct", func(t *testing.T) {
		ctx := testCtx(t)
		pool := poolFor(t, direct)
		e, err := NewEngine(pool, Table{Schema: "public", Name: "direct_event", Scope: ScopeConsumerGroup, Interval: Daily}, WithoutFirstPartitions())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.EnsureTable(ctx, testOwner); err != nil {
			t.Fatalf("EnsureTable directly: %v", err)
		}
	})
}

func poolFor(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
