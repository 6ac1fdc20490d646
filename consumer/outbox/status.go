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

// Horizon takes a transaction id of its own and returns it: every
// transaction id assigned before it is smaller, so every row already
// written, committed or not, has a smaller tx. (A snapshot's xmax is not
// that bound: it is one past the latest completed transaction, and a
// transaction still running can have an id at or above it.)
func Horizon(ctx context.Context, pool *pgxpool.Pool) (uint64, error) {
	var x string
	if err := pool.QueryRow(ctx, `SELECT pg_catalog.pg_current_xact_id()::text`).Scan(&x); err != nil {
		return 0, fmt.Errorf("reading the transaction horizon: %w", err)
	}
	return parseXid(x)
}

// Unpublished reports whether a committed row for topic is not yet
// published (counted as the backlog is), and the xmin of the snapshot it
// read in: every transaction with an id below it had ended, so their
// committed rows were all seen. It needs SELECT on the table and its cursor
// table.
func Unpublished(ctx context.Context, pool *pgxpool.Pool, t Table, topic string) (pending bool, xmin uint64, err error) {
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return false, 0, err
	}
	var x string
	err = pool.QueryRow(ctx, `
SELECT EXISTS (SELECT 1
                 FROM `+t.ident()+` o, `+t.cursorIdent()+` c
                WHERE o.tx >= c.lo AND (o.tx >= c.hi OR c.after IS NULL OR o.event_id > c.after)
                  AND o.topic = $1),
       pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text`, topic).Scan(&pending, &x)
	if err != nil {
		return false, 0, fmt.Errorf("reading the unpublished rows for topic %q of outbox %s: %w", topic, t, err)
	}
	if xmin, err = parseXid(x); err != nil {
		return false, 0, fmt.Errorf("reading the snapshot of outbox %s: xmin %q: %w", t, x, err)
	}
	return pending, xmin, nil
}
