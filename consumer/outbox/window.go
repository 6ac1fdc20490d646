package outbox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The cursor (one row of <name>_relay) is a window of transaction ids
// [lo, hi) and a position in it:
//
//   - every committed row with tx < lo is published;
//   - hi was the snapshot's xmin when the window opened: every transaction
//     with an id below it had ended, so the window's rows are a fixed set,
//     all visible to any later snapshot, and none can still appear;
//   - after is the largest event_id of the window published so far (NULL:
//     none); the window is read in event_id order, a page at a time.
//
// A window that is read to its end closes (lo = hi); the next step opens
// [hi, xmin of its snapshot). Windows tile the ids from the first lo
// upwards, so no committed row is ever passed over, however late it
// commits: a row is read in the window of its own transaction id, which
// opens only once that transaction has ended. docs/design.md ("The outbox")
// has the ordering argument for the rows published ahead of their window.

// cursor is the row of the cursor table.
type cursor struct {
	lo, hi uint64
	after  *uuid.UUID
}

func (c cursor) String() string {
	a := "none"
	if c.after != nil {
		a = c.after.String()
	}
	return fmt.Sprintf("[%d, %d) after %s", c.lo, c.hi, a)
}

// row is one outbox row as read for publishing.
type row struct {
	id        uuid.UUID
	topic     string
	key       []byte
	payload   []byte
	headers   map[string]string
	createdAt time.Time
	ahead     bool // read ahead of its window for its key's order
}

func (r row) size() int {
	n := len(r.key) + len(r.payload) + len(r.topic) + 64
	for k, v := range r.headers {
		n += len(k) + len(v) + 8
	}
	return n
}

// batch is what one step publishes and the cursor it leaves.
type batch struct {
	rows []row
	next cursor
	// moved: next differs from the stored cursor (a window opened or
	// closed, or rows were read) and must be written after the publish.
	moved bool
}

func parseXid(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

// readBatch reads the next batch on conn in one REPEATABLE READ, read-only
// transaction, so the cursor, the horizon, the window's page and the rows
// read ahead all come from one snapshot. bounds caches the open window's
// smallest and largest event_id (read once per window).
func (r *Relay) readBatch(ctx context.Context, conn *pgx.Conn) (batch, error) {
	var b batch
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return b, fmt.Errorf("beginning the read: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var (
		lo, hi, xmin string
		c            cursor
	)
	err = tx.QueryRow(ctx, `SELECT c.lo::text, c.hi::text, c.after, pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text FROM `+r.tbl.cursorIdent()+` c`).
		Scan(&lo, &hi, &c.after, &xmin)
	if err != nil {
		return b, fmt.Errorf("reading the cursor: %w", err)
	}
	var h uint64
	if c.lo, err = parseXid(lo); err == nil {
		if c.hi, err = parseXid(hi); err == nil {
			h, err = parseXid(xmin)
		}
	}
	if err != nil {
		return b, fmt.Errorf("reading the cursor: %w", err)
	}
	b.next = c
	if c.lo == c.hi { // closed: open the next window, if the horizon moved
		if h <= c.hi {
			return b, nil
		}
		c.hi, c.after = h, nil
		b.next, b.moved = c, true
		r.window = nil
	}
	if r.window == nil || r.window.lo != c.lo || r.window.hi != c.hi {
		var lo, hi *uuid.UUID
		// PostgreSQL 15 has no min(uuid): the two ends by ORDER BY (a
		// top-1 sort of the window's rows, found through the tx index).
		// The window's rows are materialized first: as "ORDER BY event_id
		// LIMIT 1" over the table, the planner (a generic plan of the
		// prepared statement, or a custom one without statistics on tx)
		// walked the primary key from the oldest row and filtered on tx,
		// reading every row still in the table on every window.
		err := tx.QueryRow(ctx, `WITH w AS MATERIALIZED (SELECT o.event_id FROM `+r.tbl.ident()+` o WHERE o.tx >= $1::text::pg_catalog.xid8 AND o.tx < $2::text::pg_catalog.xid8)
SELECT (SELECT w.event_id FROM w ORDER BY w.event_id LIMIT 1), (SELECT w.event_id FROM w ORDER BY w.event_id DESC LIMIT 1)`,
			strconv.FormatUint(c.lo, 10), strconv.FormatUint(c.hi, 10)).Scan(&lo, &hi)
		if err != nil {
			return b, fmt.Errorf("reading the window %s: %w", c, err)
		}
		r.window = &windowBounds{lo: c.lo, hi: c.hi, empty: lo == nil}
		if lo != nil {
			r.window.min, r.window.max = *lo, *hi
		}
	}
	if r.window.empty {
		c.lo, c.after = c.hi, nil
		b.next, b.moved = c, true
		return b, nil
	}
	rows, err := tx.Query(ctx, `
SELECT o.event_id, o.topic, o.key, o.payload, o.headers, o.created_at
  FROM `+r.tbl.ident()+` o
 WHERE o.event_id >= $1 AND o.event_id <= $2 AND ($3::uuid IS NULL OR o.event_id > $3::uuid)
   AND o.tx >= $4::text::pg_catalog.xid8 AND o.tx < $5::text::pg_catalog.xid8
 ORDER BY o.event_id
 LIMIT $6`, r.window.min, r.window.max, c.after, strconv.FormatUint(c.lo, 10), strconv.FormatUint(c.hi, 10), r.cfg.BatchSize)
	if err != nil {
		return b, fmt.Errorf("reading the window %s: %w", c, err)
	}
	page, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return b, fmt.Errorf("reading the window %s: %w", c, err)
	}
	if len(page) == 0 { // nothing after the position: the window is done
		c.lo, c.after = c.hi, nil
		b.next, b.moved = c, true
		return b, tx.Commit(ctx)
	}
	// Bound the bytes of one publish (docs/design.md: one record batch per
	// partition), keeping at least one row.
	size := 0
	for i, p := range page {
		size += p.size()
		if i > 0 && size > r.cfg.BatchBytes {
			page = page[:i]
			break
		}
	}
	last := page[len(page)-1].id
	if last == r.window.max {
		c.lo, c.after = c.hi, nil // read to its end: the window closes
	} else {
		c.after = &last
	}
	b.next, b.moved = c, true
	ahead, err := r.readAhead(ctx, tx, page, c.hi)
	if err != nil {
		return b, err
	}
	b.rows = append(page, ahead...)
	slices.SortFunc(b.rows, func(x, y row) int { return compareUUID(x.id, y.id) })
	return b, tx.Commit(ctx)
}

// readAhead reads, for each key in page, the committed rows of that key
// with a transaction id at or above hi (not yet in any window) and an
// event_id below the key's largest in page: they committed before that row
// (the emit function's key lock) and are published first. They are
// published again in their own window, as duplicates with the same eventId.
func (r *Relay) readAhead(ctx context.Context, tx pgx.Tx, page []row, hi uint64) ([]row, error) {
	type tk struct{ topic, key string }
	maxOf := map[tk]uuid.UUID{}
	for _, p := range page {
		if p.key == nil {
			continue
		}
		k := tk{p.topic, string(p.key)}
		if m, ok := maxOf[k]; !ok || compareUUID(p.id, m) > 0 {
			maxOf[k] = p.id
		}
	}
	if len(maxOf) == 0 {
		return nil, nil
	}
	topics, keys, maxes := make([]string, 0, len(maxOf)), make([][]byte, 0, len(maxOf)), make([]uuid.UUID, 0, len(maxOf))
	for k, m := range maxOf {
		topics, keys, maxes = append(topics, k.topic), append(keys, []byte(k.key)), append(maxes, m)
	}
	rows, err := tx.Query(ctx, `
SELECT o.event_id, o.topic, o.key, o.payload, o.headers, o.created_at
  FROM `+r.tbl.ident()+` o
  JOIN ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::bytea[]), pg_catalog.unnest($3::uuid[])) AS k(topic, key, max_id)
    ON o.topic = k.topic AND o.key = k.key AND o.event_id < k.max_id
 WHERE o.tx >= $4::text::pg_catalog.xid8`, topics, keys, maxes, strconv.FormatUint(hi, 10))
	if err != nil {
		return nil, fmt.Errorf("reading rows ahead of their window: %w", err)
	}
	ahead, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return nil, fmt.Errorf("reading rows ahead of their window: %w", err)
	}
	for i := range ahead {
		ahead[i].ahead = true
	}
	return ahead, nil
}

func scanRow(rows pgx.CollectableRow) (row, error) {
	var o row
	err := rows.Scan(&o.id, &o.topic, &o.key, &o.payload, &o.headers, &o.createdAt)
	return o, err
}

// windowBounds are the open window's smallest and largest event_id.
type windowBounds struct {
	lo, hi   uint64
	empty    bool
	min, max uuid.UUID
}

func compareUUID(a, b uuid.UUID) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// writeCursor stores c on the lock-holding connection, after the batch read
// with it was acknowledged. The row's lock_key is compared as well: a cursor
// table made anew (reset by dropping it) is not written with an old key.
func (r *Relay) writeCursor(ctx context.Context, conn *pgx.Conn, c cursor) error {
	tag, err := conn.Exec(ctx, `UPDATE `+r.tbl.cursorIdent()+` SET lo = $1::text::pg_catalog.xid8, hi = $2::text::pg_catalog.xid8, after = $3, updated_at = pg_catalog.now() WHERE lock_key = $4`,
		strconv.FormatUint(c.lo, 10), strconv.FormatUint(c.hi, 10), c.after, r.lockKey)
	if err != nil {
		return fmt.Errorf("writing the cursor %s: %w", c, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("writing the cursor %s: the cursor row with this relay's lock key is gone (reset?)", c)
	}
	return nil
}
