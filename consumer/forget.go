package consumer

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// forget takes one id back out of the dedup table, inside the batch
// transaction that inserted it (so the row never becomes visible). It is the
// only DELETE the runtime issues; retention is by dropping partitions. The
// statement, and so the table's layout, belongs to dedup.
func (c *Consumer) forget(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	return c.inserter.Forget(ctx, tx, id)
}
