package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

const testOwner = "0b7c2f4e-outbox-test"

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newOutbox makes an outbox table with its partitions (Daily, premake 2,
// retention 48h at now) in a fresh database.
func newOutbox(t *testing.T) (*pgxpool.Pool, outbox.Table) {
	t.Helper()
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	tbl := outbox.Table{Name: "outbox"}
	if err := outbox.Ensure(ctx, pool, tbl, testOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Maintain(ctx, pool, tbl, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	return pool, tbl
}
