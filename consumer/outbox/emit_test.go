package outbox_test

import (
	"testing"

	"github.com/idempotency-dev/operator/consumer/outbox"
)

// TestEmit_InTheCallersTransaction: Emit returns a UUID v7 made in the
// transaction; the row exists if and only if the transaction commits, with
// the transaction's own xid in tx; Ensure a second time changes nothing.
func TestEmit_InTheCallersTransaction(t *testing.T) {
	ctx := testCtx(t)
	pool, tbl := newOutbox(t)
	if err := outbox.Ensure(ctx, pool, tbl, testOwner); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if err := outbox.Ensure(ctx, pool, tbl, "someone-else"); err == nil {
		t.Fatal("Ensure for another owner succeeded")
	}
	emit := func(commit bool, key string) (string, string) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		id, err := outbox.Emit(ctx, tx, tbl, outbox.Message{Topic: "orders", Key: []byte(key), Payload: []byte(`{"n":1}`),
			Headers: map[string]string{"type": "OrderConfirmed"}, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
		if err != nil {
			t.Fatal(err)
		}
		if id.Version() != 7 || id.Variant().String() != "RFC4122" {
			t.Fatalf("event id %s is not a UUID v7 (version %d, variant %s)", id, id.Version(), id.Variant())
		}
		var xid string
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return id.String(), xid
	}
	kept, keptXid := emit(true, "k1")
	gone, _ := emit(false, "k1")

	var n int
	var tx, headers string
	err := pool.QueryRow(ctx, `SELECT count(*) OVER (), tx::text, headers::text FROM outbox WHERE event_id = $1`, kept).Scan(&n, &tx, &headers)
	if err != nil {
		t.Fatal(err)
	}
	if tx != keptXid {
		t.Errorf("tx = %s, want the emitting transaction's %s", tx, keptXid)
	}
	if want := `{"type": "OrderConfirmed", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`; headers != want {
		t.Errorf("headers = %s, want %s", headers, want)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE event_id = $1`, gone).Scan(&n); err != nil || n != 0 {
		t.Errorf("rolled-back event: %d rows (err %v), want 0", n, err)
	}
	// Any language: the function itself, with headers that are not strings refused.
	if _, err := pool.Exec(ctx, `SELECT public.outbox_emit('orders', 'k'::bytea, NULL, '{"a": 1}'::jsonb)`); err == nil {
		t.Error("headers with a number accepted")
	}
	var id string
	if err := pool.QueryRow(ctx, `SELECT public.outbox_emit('orders', NULL, 'p'::bytea)::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
}

// TestEmit_IdsIncreaseWithinATransaction: events emitted one after the other
// in one transaction get increasing ids (the relay publishes in id order), also
// when the clock has not moved on between two calls.
func TestEmit_IdsIncreaseWithinATransaction(t *testing.T) {
	ctx := testCtx(t)
	pool, _ := newOutbox(t)
	var ordered bool
	var n int
	err := pool.QueryRow(ctx, `
WITH e AS (SELECT g, public.outbox_emit('orders', 'k'::bytea, NULL) AS id FROM generate_series(1, 2000) g)
SELECT count(*), array_agg(id ORDER BY g) = array_agg(id ORDER BY id) FROM e`).Scan(&n, &ordered)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2000 || !ordered {
		t.Fatalf("%d events emitted in one statement; ids in emit order: %v", n, ordered)
	}
}
