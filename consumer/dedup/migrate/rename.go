package migrate

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

type indexRename struct{ from, to string }

// renamedIndexes plans the new names of the legacy table's indexes named
// after it (its primary key index is <table>_pkey, which the new table needs).
func renamedIndexes(ctx context.Context, q querier, src source, renameTo string) ([]indexRename, error) {
	names, err := queryStrings(ctx, q, `
SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = $1 ORDER BY 1`, src.rel.oid)
	if err != nil {
		return nil, fmt.Errorf("listing the indexes of %s: %w", src, err)
	}
	var out []indexRename
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, src.name+"_")
		if !ok {
			continue
		}
		to := renameTo + "_" + rest
		if len(to) > dedup.MaxIdentifierLen {
			// Keep it unique and within the limit instead of letting the
			// server truncate it.
			h := fnv.New32a()
			_, _ = h.Write([]byte(n)) // a hash.Hash never returns an error
			suffix := fmt.Sprintf("_%08x", h.Sum32())
			to = to[:dedup.MaxIdentifierLen-len(suffix)] + suffix
		}
		out = append(out, indexRename{from: n, to: to})
	}
	return out, nil
}

// legacyDDL runs fn, DDL on the legacy table, in a transaction whose
// lock_timeout is Config.LockTimeout: while the DDL waits for a writer's
// transaction, every other writer queues behind it, so it must give up soon
// (and let them through) rather than wait as long as the open transaction
// lasts. A lock timeout is retried up to Config.LockAttempts times, one
// lock timeout apart.
func legacyDDL(ctx context.Context, pool *pgxpool.Pool, cfg Config, src source, what string, fn func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", cfg.LockTimeout.Milliseconds())); err != nil {
				return err
			}
			return fn(tx)
		})
		if err == nil || !dedup.IsLockTimeout(err) {
			return err
		}
		if attempt >= cfg.LockAttempts {
			return fmt.Errorf("%s: %s is in use: another transaction held its lock through %d attempts of %s lock timeout (a writer with a long or idle open transaction?); "+
				"end that transaction or stop the writers, or raise the lock timeout, then run again: %w", what, src, attempt, cfg.LockTimeout, err)
		}
		cfg.Logger.Warn("the legacy table is locked; retrying", "what", what, "table", src.String(), "attempt", attempt, "lockTimeout", cfg.LockTimeout)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cfg.LockTimeout):
		}
	}
}

// renameLegacy renames the table and its indexes in one transaction, with
// legacyDDL's lock timeout and retries.
func renameLegacy(ctx context.Context, pool *pgxpool.Pool, cfg Config, src source, idx []indexRename) error {
	return legacyDDL(ctx, pool, cfg, src, "renaming the legacy table", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s RENAME TO %s", src.ident(), pgx.Identifier{cfg.RenameTo}.Sanitize())); err != nil {
			return fmt.Errorf("renaming %s: %w", src, err)
		}
		for _, ix := range idx {
			// Renaming a constraint's index renames the constraint too.
			if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER INDEX %s RENAME TO %s",
				pgx.Identifier{src.schema, ix.from}.Sanitize(), pgx.Identifier{ix.to}.Sanitize())); err != nil {
				return fmt.Errorf("renaming index %s of %s: %w", ix.from, src, err)
			}
		}
		return nil
	})
}
