package migrate

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// syncFunction is the trigger function's name: one per target table.
func syncFunction(cfg Config) pgx.Identifier {
	return pgx.Identifier{cfg.LegacySchema, cfg.Table.Name + "_legacy_sync"}
}

// installSyncTrigger makes every row inserted into the legacy table from now
// on be copied into the new table in the same transaction. A row whose id has
// no partition is left in the legacy table only (the copy reports those);
// any other failure is a warning, never an error for the legacy writer.
func installSyncTrigger(ctx context.Context, pool *pgxpool.Pool, cfg Config, src source) error {
	// groupRE admits no quote or backslash, so the group is a plain literal.
	body := strings.NewReplacer(
		"$V7", v7("NEW."+src.id),
		"$TARGET", pgx.Identifier{cfg.Table.Schema, cfg.Table.Name}.Sanitize(),
		"$NAME", "'"+cfg.Table.String()+"'",
		"$ID", "NEW."+src.id,
		"$GROUP", src.groupExpr("NEW", "'"+cfg.Group+"'"),
		"$AT", src.atExpr("NEW"),
	).Replace(`
BEGIN
  IF $V7 THEN
    BEGIN
      INSERT INTO $TARGET (event_id, consumer_group, processed_at)
      VALUES ($ID, $GROUP, $AT)
      ON CONFLICT DO NOTHING;
    EXCEPTION
      WHEN check_violation THEN NULL; -- no partition for this id: outside the dedup window
      WHEN OTHERS THEN RAISE WARNING 'idempotency legacy sync into %: % (SQLSTATE %)', $NAME, SQLERRM, SQLSTATE;
    END;
  END IF;
  RETURN NULL;
END`)
	fn := syncFunction(cfg).Sanitize()
	return legacyDDL(ctx, pool, cfg, src, "installing the sync trigger", func(tx pgx.Tx) error {
		// SECURITY DEFINER: the legacy writers insert as roles of their
		// own, with no right on the new table; as invoker the copy would
		// fail into a WARNING nobody reads. So the function runs as this
		// role, with a fixed search_path, and only this role may attach it
		// (EXECUTE is checked when a trigger is created, not when it fires).
		if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $idempotency_sync$%s$idempotency_sync$", fn, body)); err != nil {
			return fmt.Errorf("creating the sync trigger function: %w", err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("REVOKE EXECUTE ON FUNCTION %s() FROM PUBLIC", fn)); err != nil {
			return fmt.Errorf("restricting the sync trigger function: %w", err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE OR REPLACE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()",
			pgx.Identifier{SyncTriggerName}.Sanitize(), src.ident(), fn)); err != nil {
			return fmt.Errorf("creating the sync trigger on %s: %w", src, err)
		}
		return nil
	})
}

// hasSyncTrigger reports whether the legacy table carries the sync trigger
// (installed by an earlier run).
func hasSyncTrigger(ctx context.Context, q querier, src source) (bool, error) {
	var left bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1 AND tgname = $2)`,
		src.rel.oid, SyncTriggerName).Scan(&left); err != nil {
		return false, fmt.Errorf("looking for a sync trigger on %s: %w", src, err)
	}
	return left, nil
}

// RemoveSyncTrigger drops the trigger and function Config.SyncTrigger
// installed; it does nothing when they are gone already.
func RemoveSyncTrigger(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	src, _, err := locate(ctx, pool, cfg)
	if err != nil {
		return err
	}
	return legacyDDL(ctx, pool, cfg, src, "removing the sync trigger", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", pgx.Identifier{SyncTriggerName}.Sanitize(), src.ident())); err != nil {
			return fmt.Errorf("dropping the sync trigger on %s: %w", src, err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("DROP FUNCTION IF EXISTS %s()", syncFunction(cfg).Sanitize())); err != nil {
			return fmt.Errorf("dropping the sync trigger function: %w", err)
		}
		return nil
	})
}
