package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Maintain keeps t's partitions with dedup's engine: premake partitions
// ahead of now, and drop a partition once its range ended more than
// retention ago AND every row in it is published (dropGuard). A partition
// holding an unpublished row stays, however old, and is looked at again on
// the next run.
func Maintain(ctx context.Context, pool *pgxpool.Pool, t Table, now time.Time, premake int, retention time.Duration, opts ...dedup.Option) (dedup.Result, error) {
	eng, err := NewEngine(pool, t, opts...)
	if err != nil {
		return dedup.Result{}, err
	}
	return eng.Maintain(ctx, now, premake, retention)
}

// dropGuard keeps a partition that has a row at or above the cursor's lower
// bound: every row below it is published (window.go). A row of the current
// window that is published already counts as unpublished until the window
// closes, which only delays the drop. The tx index makes it one probe.
//
// Rows still being committed: a transaction that inserted into the
// partition and is still open has a row the check cannot see, and the
// DETACH ... CONCURRENTLY that follows waits for it to end, so its row
// would commit into the table being dropped (test:
// TestRetention_KeepsAPartitionWithARowStillBeingCommitted). The check
// therefore runs under a SHARE lock
// of the partition, which waits for every open inserter (each holds ROW
// EXCLUSIVE on it until it ends; the session's lock_timeout bounds the
// wait, and a timeout keeps the partition for the next run) and then sees
// their rows committed.
//
// Once detached, a partition takes no row at all: an insert names the
// outbox (the emit function does, and emitters hold no grant on the
// partitions), and the outbox no longer routes to it; so what the check saw
// is what is dropped, but for one case: an insert that begins after the
// check and before the DETACH with an event_id inside this expired range (a
// producer's own id from a clock days behind), which DETACH ... CONCURRENTLY
// again waits for. Only a check after the DETACH, in the partition engine
// (consumer/dedup), would close that.
func dropGuard(t Table) dedup.DropGuard {
	return func(ctx context.Context, conn *pgx.Conn, p dedup.Partition) (bool, error) {
		part := pgx.Identifier{t.Schema, p.Name}.Sanitize()
		var keep bool
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `LOCK TABLE `+part+` IN SHARE MODE`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s o WHERE o.tx >= (SELECT c.lo FROM %s c))`,
				part, t.cursorIdent())).Scan(&keep)
		})
		if err != nil {
			return true, fmt.Errorf("looking for unpublished rows in %s: %w", p.Name, err)
		}
		return keep, nil
	}
}
