package outbox_test

import (
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestEnsure_InASchemaMadeForTheOwner: a DBA makes the schema for the
// operator's role and grants nothing on the database; Ensure makes the
// outbox there (and again) without CREATE on the database, as dedup's
// EnsureTable does.
func TestEnsure_InASchemaMadeForTheOwner(t *testing.T) {
	ctx := testCtx(t)
	admin := consumertest.NewPool(t)
	url := admin.Config().ConnString()
	owner := consumertest.NewRole(t, url, "owner")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA shop AUTHORIZATION "+pgx.Identifier{owner.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, owner.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tbl := outbox.Table{Schema: "shop", Name: "outbox"}
	for i := range 2 {
		if err := outbox.Ensure(ctx, pool, tbl, testOwner); err != nil {
			t.Fatalf("Ensure #%d as the schema's owner without CREATE on the database: %v", i+1, err)
		}
	}
	if _, err := outbox.Maintain(ctx, pool, tbl, time.Now(), 1, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := pool.QueryRow(ctx, `SELECT shop.outbox_emit('orders', 'k'::bytea, 'p'::bytea)::text`).Scan(&id); err != nil {
		t.Fatalf("emitting into the new outbox: %v", err)
	}
}
