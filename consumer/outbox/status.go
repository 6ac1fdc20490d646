package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Stats is what an outbox's tables say about its progress, for a status
// page or an operator: read-only, and read in one snapshot.
type Stats struct {
	// Backlog counts the committed rows not yet published (the relay's
	// own idempotent_consumer_outbox_backlog, computed the same way), up
	// to a million: a count of a larger backlog would take longer than a
	// status read may.
	Backlog int64
	// OldestUnpublished is the created_at of the oldest of them; zero
	// when the backlog is empty.
	OldestUnpublished time.Time
	// Cursor is the relay's cursor: every row of a transaction below Lo
	// is published; [Lo, Hi) is the open window, published up to the
	// event id After (nil: none yet).
	Lo, Hi uint64
	After  *uuid.UUID
	// CursorUpdated is when the relay last wrote the cursor.
	CursorUpdated time.Time
}

// ReadStats reads t's backlog, oldest unpublished row and cursor in one
// read-only REPEATABLE READ transaction. It needs SELECT on the table and
// its cursor table (the owner's role, or a relay's).
func ReadStats(ctx context.Context, pool *pgxpool.Pool, t Table) (Stats, error) {
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return Stats{}, err
	}
	var st Stats
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var lo, hi string
		var updated time.Time
		err := tx.QueryRow(ctx, `SELECT lo::text, hi::text, after, updated_at FROM `+t.cursorIdent()).Scan(&lo, &hi, &st.After, &updated)
		if err != nil {
			return fmt.Errorf("reading the cursor of outbox %s: %w", t, err)
		}
		if st.Lo, err = parseXid(lo); err != nil {
			return fmt.Errorf("reading the cursor of outbox %s: lo %q: %w", t, lo, err)
		}
		if st.Hi, err = parseXid(hi); err != nil {
			return fmt.Errorf("reading the cursor of outbox %s: hi %q: %w", t, hi, err)
		}
		st.CursorUpdated = updated
		// The rows the relay's readMetrics counts: at or above the
		// window's start, less those of the open window already published.
		var oldest *time.Time
		err = tx.QueryRow(ctx, `
SELECT count(*), min(b.created_at)
  FROM (SELECT o.created_at
          FROM `+t.ident()+` o, `+t.cursorIdent()+` c
         WHERE o.tx >= c.lo AND (o.tx >= c.hi OR c.after IS NULL OR o.event_id > c.after)
         LIMIT $1) b`, backlogCountLimit).Scan(&st.Backlog, &oldest)
		if err != nil {
			return fmt.Errorf("reading the backlog of outbox %s: %w", t, err)
		}
		if oldest != nil {
			st.OldestUnpublished = *oldest
		}
		return nil
	})
	return st, err
}
