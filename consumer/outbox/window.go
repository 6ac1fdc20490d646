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
	// aheadEnd: the batch holds only rows read ahead of the page at next,
	// up to this id; once it is acknowledged, a retry of that page goes on
	// after it.
	aheadEnd *uuid.UUID
	// lastSent: when the batch's last statement was sent (its page, or
	// the window's bounds); zero when it ran none.
	lastSent time.Time
}

func parseXid(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

// readBatch reads the batch after the cursor c on conn. Each statement
// reads from one snapshot: opening a window reads the horizon and the
// window's bounds together; a page and the rows read ahead of it are one
// statement. The page's rows are a fixed set (every transaction below hi
// had ended when the window opened, so any later snapshot sees them all),
// and a row read ahead of its window committed before the page's row of its
// key was inserted (the emit function's key lock), so one snapshot that sees
// the page sees them too. r.window caches the open window's smallest and
// largest event_id (read once per window). The relay owns the cursor while
// it holds the lock, so c is its own copy, not read from the table.
func (r *Relay) readBatch(parent context.Context, conn *pgx.Conn, c cursor) (batch, error) {
	b := batch{next: c}
	// Deadlines (readBatchWithin): opening a window scans it (scanTimeout),
	// the rest is a page (StallTimeout).
	ctx, cancel := context.WithTimeout(parent, r.scanTimeout())
	defer cancel()
	if c.lo == c.hi { // closed: open the next window, if the horizon moved
		b.lastSent = time.Now()
		h, lo, hi, err := r.readBounds(ctx, conn, c.hi, nil)
		if err != nil {
			return b, err
		}
		if h <= c.hi {
			return b, nil
		}
		c.hi, c.after = h, nil
		b.next, b.moved = c, true
		r.setWindow(c, lo, hi)
	}
	if r.window == nil || r.window.lo != c.lo || r.window.hi != c.hi {
		b.lastSent = time.Now()
		_, lo, hi, err := r.readBounds(ctx, conn, c.lo, &c.hi)
		if err != nil {
			return b, err
		}
		r.setWindow(c, lo, hi)
	}
	if r.window.empty {
		c.lo, c.after = c.hi, nil
		b.next, b.moved = c, true
		return b, nil
	}
	ctx, cancelPage := context.WithTimeout(parent, r.cfg.StallTimeout)
	defer cancelPage()
	// The lower bound is one index condition: "after IS NULL OR event_id >
	// after" was a filter in the generic plan, and each page walked the
	// window from its first row (quadratic in the window's pages).
	after := uuid.Nil // below every UUID v7
	if c.after != nil {
		after = *c.after
	}
	// The rows read ahead are bounded too (BatchSize + 1, in event_id
	// order, after those of this page handed over already): a key with a
	// million events committed while an older transaction on it was open
	// would otherwise make one batch of them all. Their ids are found
	// through the tx index first (a: usually none), sorted and cut (f),
	// and only those rows read: ordered by the primary key instead, the
	// planner walked the whole table from the smallest id.
	aheadAfter := uuid.Nil
	if r.aheadFor != nil && sameCursor(*r.aheadFor, c) {
		aheadAfter = r.aheadAfter
	}
	r.aheadFor = nil
	b.lastSent = time.Now()
	rows, err := conn.Query(ctx, `
WITH p AS (
SELECT o.event_id, o.topic, o.key, o.payload, o.headers, o.created_at
  FROM `+r.tbl.ident()+` o
 WHERE o.event_id >= $1 AND o.event_id <= $2 AND o.event_id > $3
   AND o.tx >= $4::text::pg_catalog.xid8 AND o.tx < $5::text::pg_catalog.xid8
 ORDER BY o.event_id
 LIMIT $6),
a AS MATERIALIZED (
SELECT o.event_id
  FROM `+r.tbl.ident()+` o
 WHERE o.tx >= $5::text::pg_catalog.xid8 AND o.event_id > $7
   AND EXISTS (SELECT FROM p WHERE p.topic = o.topic AND p.key = o.key AND p.event_id > o.event_id)),
f AS (SELECT a.event_id FROM a ORDER BY a.event_id LIMIT $6 + 1)
SELECT false, p.event_id, p.topic, p.key, p.payload, p.headers, p.created_at FROM p
UNION ALL
SELECT true, o.event_id, o.topic, o.key, o.payload, o.headers, o.created_at
  FROM f JOIN `+r.tbl.ident()+` o ON o.event_id = f.event_id`,
		r.window.min, r.window.max, after, strconv.FormatUint(c.lo, 10), strconv.FormatUint(c.hi, 10), r.cfg.BatchSize, aheadAfter)
	if err != nil {
		return b, fmt.Errorf("reading the window %s: %w", c, err)
	}
	all, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return b, fmt.Errorf("reading the window %s: %w", c, err)
	}
	var page, ahead []row
	for _, o := range all {
		if o.ahead {
			ahead = append(ahead, o)
		} else {
			page = append(page, o)
		}
	}
	if len(page) == 0 { // nothing after the position: the window is done
		c.lo, c.after = c.hi, nil
		b.next, b.moved = c, true
		return b, nil
	}
	// The batch is a prefix, in event_id order, of the page and the rows
	// read ahead of it, of at most BatchSize rows and BatchBytes bytes
	// (docs/design.md: one record batch per partition), keeping at least
	// one row. A prefix keeps every key's order: a page row goes out only
	// with every row of its key with a smaller id, which the prefix holds
	// before it (the read-ahead is cut to its first BatchSize rows, all
	// below any page row past them, which the count bound leaves out).
	if len(ahead) > r.cfg.BatchSize {
		ahead = ahead[:r.cfg.BatchSize]
	}
	merged := append(slices.Clip(page), ahead...)
	slices.SortFunc(merged, func(x, y row) int { return compareUUID(x.id, y.id) })
	n, size := 0, 0
	for i, o := range merged {
		size += o.size()
		if i >= r.cfg.BatchSize || i > 0 && size > r.cfg.BatchBytes {
			break
		}
		n = i + 1
	}
	b.rows, b.moved = merged[:n], true
	lastPage := -1
	for i := n - 1; i >= 0; i-- {
		if !merged[i].ahead {
			lastPage = i
			break
		}
	}
	if lastPage < 0 {
		// Only rows ahead of the page: stay at it, and read on after them
		// (the same page, so the same rows ahead, in the same order).
		held := c
		end := merged[n-1].id
		r.aheadFor, r.aheadAfter = &held, end
		b.aheadEnd = &end
		return b, nil
	}
	last := merged[lastPage].id
	if last == r.window.max {
		c.lo, c.after = c.hi, nil // read to its end: the window closes
	} else {
		c.after = &last
	}
	b.next = c
	return b, nil
}

// readBounds reads the smallest and largest event_id of the window [lo, hi)
// (nil: empty); with hi nil, hi is the horizon of the statement's snapshot,
// returned as h (a window being opened).
func (r *Relay) readBounds(ctx context.Context, conn *pgx.Conn, lo uint64, hi *uint64) (h uint64, min, max *uuid.UUID, err error) {
	var hs *string
	if hi != nil {
		s := strconv.FormatUint(*hi, 10)
		hs = &s
	}
	// PostgreSQL 15 has no min(uuid): the two ends by ORDER BY (a top-1
	// sort of the window's rows, found through the tx index). The window's
	// rows are materialized first: as "ORDER BY event_id LIMIT 1" over the
	// table, the planner (a generic plan of the prepared statement, or a
	// custom one without statistics on tx) walked the primary key from the
	// oldest row and filtered on tx, reading every row still in the table
	// on every window.
	var s string
	err = conn.QueryRow(ctx, `WITH x AS MATERIALIZED (SELECT coalesce($2::text::pg_catalog.xid8, pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())) AS h),
w AS MATERIALIZED (SELECT o.event_id FROM `+r.tbl.ident()+` o WHERE o.tx >= $1::text::pg_catalog.xid8 AND o.tx < (SELECT x.h FROM x))
SELECT (SELECT x.h::text FROM x), (SELECT w.event_id FROM w ORDER BY w.event_id LIMIT 1), (SELECT w.event_id FROM w ORDER BY w.event_id DESC LIMIT 1)`,
		strconv.FormatUint(lo, 10), hs).Scan(&s, &min, &max)
	if err == nil {
		h, err = parseXid(s)
	}
	if err != nil {
		return 0, nil, nil, fmt.Errorf("reading the window from %d: %w", lo, err)
	}
	return h, min, max, nil
}

func sameCursor(a, b cursor) bool {
	return a.lo == b.lo && a.hi == b.hi && (a.after == nil) == (b.after == nil) && (a.after == nil || *a.after == *b.after)
}

func (r *Relay) setWindow(c cursor, lo, hi *uuid.UUID) {
	r.window = &windowBounds{lo: c.lo, hi: c.hi, empty: lo == nil}
	if lo != nil {
		r.window.min, r.window.max = *lo, *hi
	}
}

func scanRow(rows pgx.CollectableRow) (row, error) {
	var o row
	err := rows.Scan(&o.ahead, &o.id, &o.topic, &o.key, &o.payload, &o.headers, &o.createdAt)
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
