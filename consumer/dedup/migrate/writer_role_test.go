package migrate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup/migrate"
)

// TestSyncTriggerCopiesForAnotherWriterRole: the old consumers usually write
// the legacy table as a role of their own, with no right on the new table.
// The sync trigger must still copy their rows (it runs with the rights of
// the migration's role), and no other role may attach its function to a
// table of its own to write ids into the dedup table.
func TestSyncTriggerCopiesForAnotherWriterRole(t *testing.T) {
	ctx := testCtx(t)
	pool := consumertest.NewPool(t)
	now := time.Now().UTC()
	tbl := legacyEvents(t, pool, now, 10)
	cfg := migrate.Config{Table: tbl, Owner: owner, Group: "orders", Legacy: "app_events", SyncTrigger: true,
		Now: func() time.Time { return now }}
	if _, err := migrate.Run(ctx, pool, cfg); err != nil {
		t.Fatalf("run: %v", err)
	}

	writer := fmt.Sprintf("legacy_writer_%d", time.Now().UnixNano())
	exec(t, pool, fmt.Sprintf(`CREATE ROLE %s`, writer))
	t.Cleanup(func() {
		exec(t, pool, fmt.Sprintf(`DROP OWNED BY %s`, writer))
		exec(t, pool, fmt.Sprintf(`DROP ROLE %s`, writer))
	})
	exec(t, pool, fmt.Sprintf(`GRANT INSERT ON app_events TO %s`, writer))
	exec(t, pool, fmt.Sprintf(`GRANT CREATE ON SCHEMA public TO %s`, writer))

	late := idAt(time.Now())
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL ROLE %s`, writer)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO app_events (event_id) VALUES ($1)`, late); err != nil {
		t.Fatalf("legacy insert as %s: %v", writer, err)
	}
	// The same role tries to reuse the trigger function on a table of its own.
	if _, err := tx.Exec(ctx, `CREATE TABLE forged (event_id uuid, processed_at timestamptz DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	_, attachErr := tx.Exec(ctx, `CREATE TRIGGER forge AFTER INSERT ON forged FOR EACH ROW EXECUTE FUNCTION public.processed_event_legacy_sync()`)
	if attachErr == nil {
		t.Errorf("a role without rights on the dedup table attached the sync function to its own table")
	} else if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM processed_event WHERE event_id = $1 AND consumer_group = 'orders'`, late); n != 1 {
		t.Errorf("a legacy row inserted by %s (no right on the new table) was not copied by the sync trigger: %d rows", writer, n)
	}
}
