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
// bound: every row below it is published (cursor.go). A row of the current
// window that is published already counts as unpublished until the window
// closes, which only delays the drop. The tx index makes it one probe.
func dropGuard(t Table) dedup.DropGuard {
	return func(ctx context.Context, conn *pgx.Conn, p dedup.Partition) (bool, error) {
		var keep bool
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s o WHERE o.tx >= (SELECT c.lo FROM %s c))`,
			pgx.Identifier{t.Schema, p.Name}.Sanitize(), t.cursorIdent())).Scan(&keep)
		if err != nil {
			return true, fmt.Errorf("looking for unpublished rows in %s: %w", p.Name, err)
		}
		return keep, nil
	}
}
