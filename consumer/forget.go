package consumer

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// forgetSQL returns the statement that takes one id back out of the dedup
// table, inside the batch transaction that inserted it (so the row never
// becomes visible). It is the only DELETE the runtime issues; retention is
// by dropping partitions. The column names are those of dedup's layout:
// event_id, and consumer_group under scope ConsumerGroup.
//
// TODO(dedup): move into dedup as (*Inserter).Forget so the layout has one
// owner.
func forgetSQL(t dedup.Table) (string, bool) {
	t = t.WithDefaults()
	name := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	if t.Scope == dedup.ScopeGlobal {
		return "DELETE FROM " + name + " WHERE event_id = $1", false
	}
	return "DELETE FROM " + name + " WHERE event_id = $1 AND consumer_group = $2", true
}

func (c *Consumer) forget(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	sql, withGroup := forgetSQL(c.cfg.Table)
	var err error
	if withGroup {
		_, err = tx.Exec(ctx, sql, id, c.cfg.Group)
	} else {
		_, err = tx.Exec(ctx, sql, id)
	}
	return err
}
