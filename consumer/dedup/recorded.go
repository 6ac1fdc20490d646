package dedup

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// DB is what Recorded reads through: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Recorded reports, index-aligned with ids, which ids the inserter's group
// has recorded already and which are outside the dedup window (those are not
// sent). It is one SELECT that takes no row locks, so it never waits on a
// transaction inserting the same ids: an id whose insert has not committed
// yet is reported not recorded. The window verdict comes from the same cache
// Insert uses (re-read the same way when stale or missed), so Recorded and a
// later Insert agree unless a partition is created or detached in between.
// It opens a short transaction of its own only to re-read the window.
func (in *Inserter) Recorded(ctx context.Context, db DB, ids []uuid.UUID) (recorded, outside []bool, err error) {
	recorded, outside = make([]bool, len(ids)), make([]bool, len(ids))
	if len(ids) == 0 {
		return recorded, outside, nil
	}
	cov, err := in.coverageVia(ctx, db, false)
	if err != nil {
		return nil, nil, err
	}
	send := classify(cov, ids, outside)
	if len(send) < uniqueCount(ids) && in.age() >= missRefreshInterval {
		if cov, err = in.coverageVia(ctx, db, true); err != nil {
			return nil, nil, err
		}
		send = classify(cov, ids, outside)
	}
	if len(send) == 0 {
		return recorded, outside, nil
	}
	var rows pgx.Rows
	if in.table.Scope == ScopeConsumerGroup {
		rows, err = db.Query(ctx, in.recordedSQL(), send, in.group)
	} else {
		rows, err = db.Query(ctx, in.recordedSQL(), send)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("looking up %d event ids in %s: %w", len(send), in.table, err)
	}
	found := make(map[uuid.UUID]bool, len(send))
	for rows.Next() {
		var id pgtype.UUID
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("looking up event ids in %s: %w", in.table, err)
		}
		found[id.Bytes] = true
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("looking up %d event ids in %s: %w", len(send), in.table, err)
	}
	for i, id := range ids {
		recorded[i] = !outside[i] && found[id]
	}
	return recorded, outside, nil
}

// recordedSQL selects the recorded ids among $1, of this group ($2) under
// ScopeConsumerGroup, of any group under ScopeGlobal: the same key Insert's
// ON CONFLICT uses.
func (in *Inserter) recordedSQL() string {
	q := fmt.Sprintf(`SELECT event_id FROM %s WHERE event_id = ANY($1::uuid[])`, pgx.Identifier{in.table.Schema, in.table.Name}.Sanitize())
	if in.table.Scope == ScopeConsumerGroup {
		q += ` AND consumer_group = $2`
	}
	return q
}

// coverageVia is coverage for a caller without a transaction: it begins a
// short one only when the window has to be read.
func (in *Inserter) coverageVia(ctx context.Context, db DB, force bool) (coverage, error) {
	in.mu.Lock()
	cov, loaded := in.cov, in.loadedAt
	in.mu.Unlock()
	if !force && !loaded.IsZero() && in.now().Sub(loaded) < in.refreshEvery {
		return cov, nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return coverage{}, fmt.Errorf("reading the dedup window of %s: %w", in.table, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return in.coverage(ctx, tx, force)
}
