package dedup

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// DefaultRefreshInterval is how long an Inserter trusts its cached window.
const DefaultRefreshInterval = time.Minute

// DefaultRefreshLockTimeout bounds how long a window refresh waits for a
// lock (see WithRefreshLockTimeout).
const DefaultRefreshLockTimeout = 500 * time.Millisecond

// missRefreshInterval rate-limits the extra window refresh done when a batch
// holds ids outside the cached window (a partition may have been created
// since): old replays would otherwise cost a catalog query per batch.
const missRefreshInterval = time.Second

// InserterOption configures an Inserter.
type InserterOption func(*Inserter)

// WithRefreshInterval sets how long the cached window is trusted before it
// is re-read from pg_catalog (default one minute).
func WithRefreshInterval(d time.Duration) InserterOption {
	return func(in *Inserter) { in.refreshEvery = d }
}

// WithRefreshLockTimeout bounds how long a window refresh may wait for a
// lock (default 500ms). Reading a partition's bounds takes ACCESS SHARE on
// it, so a refresh would otherwise queue behind another session's ACCESS
// EXCLUSIVE on an attached partition (a VACUUM FULL, a CLUSTER, a plain
// DETACH) for as long as that runs. When the wait runs out, a routine refresh
// keeps the cached window and tries again a second later; a refresh the
// batch needs (first use, ids outside the cached window, a partition gone)
// fails with a retryable *LockError, and the caller's transaction stays
// usable.
func WithRefreshLockTimeout(d time.Duration) InserterOption {
	return func(in *Inserter) { in.lockTimeout = d }
}

// WithClock sets the clock used to age the cached window (tests).
func WithClock(now func() time.Time) InserterOption {
	return func(in *Inserter) { in.now = now }
}

// Inserter performs the batched dedup insert for one consumer group. It is
// safe for concurrent use; share one per table and group.
type Inserter struct {
	table        Table
	group        string
	refreshEvery time.Duration
	lockTimeout  time.Duration
	now          func() time.Time
	insertSQL    string
	forgetSQL    string

	mu       sync.Mutex
	cov      coverage
	loadedAt time.Time // zero: never loaded
}

// BatchResult is the outcome of one Insert, index-aligned with its input.
type BatchResult struct {
	// Fresh[i] is true if ids[i] was not processed before: it was inserted
	// now, and it is the first occurrence of that id in the batch.
	Fresh []bool
	// Outside[i] is true if ids[i] has no partition (outside the dedup
	// window); it was not sent to the database.
	Outside []bool
	// Window is the window the batch was checked against.
	Window Window
}

// NewInserter validates t (after defaults) and group; no SQL is sent.
func NewInserter(t Table, group string, opts ...InserterOption) (*Inserter, error) {
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("creating dedup inserter: %w", err)
	}
	if group == "" {
		return nil, errors.New("creating dedup inserter: empty consumer group")
	}
	in := &Inserter{table: t, group: group, refreshEvery: DefaultRefreshInterval, lockTimeout: DefaultRefreshLockTimeout, now: time.Now}
	for _, o := range opts {
		o(in)
	}
	if in.lockTimeout < time.Millisecond {
		return nil, fmt.Errorf("creating dedup inserter: refresh lock timeout %s is under 1ms", in.lockTimeout)
	}
	// ON CONFLICT without a target absorbs a conflict on the primary key
	// whatever the scope; RETURNING lists only the rows inserted now.
	in.insertSQL = fmt.Sprintf(`INSERT INTO %s (event_id, consumer_group) SELECT pg_catalog.unnest($1::uuid[]), $2 ON CONFLICT DO NOTHING RETURNING event_id`,
		pgx.Identifier{t.Schema, t.Name}.Sanitize())
	// The key of the row to take back: the id alone under ScopeGlobal (one
	// row whichever group wrote it), the id and this group otherwise.
	in.forgetSQL = fmt.Sprintf(`DELETE FROM %s WHERE event_id = $1`, pgx.Identifier{t.Schema, t.Name}.Sanitize())
	if t.Scope == ScopeConsumerGroup {
		in.forgetSQL += ` AND consumer_group = $2`
	}
	return in, nil
}

// Window returns the cached window (zero before the first Insert).
func (in *Inserter) Window() Window {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cov.window()
}

// Insert records ids as processed by the inserter's group inside tx, in one
// statement, and reports which are fresh and which are outside the window.
//
// Ids outside the window are never sent, so they cannot abort tx; report
// them with OutsideWindowError. The statement runs under a savepoint: if a
// partition was detached since the window was read (SQLSTATE 23514), Insert
// rolls back to the savepoint, re-reads the window and tries once more, so
// tx stays usable. The ids are inserted in sorted order, so two batches
// sharing ids lock them in the same order and cannot deadlock each other.
// A concurrent transaction inserting the same id makes Insert wait for it:
// the id is fresh here if that transaction rolls back, not if it commits.
func (in *Inserter) Insert(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (BatchResult, error) {
	res := BatchResult{Fresh: make([]bool, len(ids)), Outside: make([]bool, len(ids))}
	if tx == nil {
		return res, errors.New("inserting event ids: nil transaction")
	}
	if len(ids) == 0 {
		return res, nil
	}
	cov, err := in.coverage(ctx, tx, false)
	if err != nil {
		return res, err
	}
	send := classify(cov, ids, res.Outside)
	if len(send) < uniqueCount(ids) && in.age() >= missRefreshInterval {
		if cov, err = in.coverage(ctx, tx, true); err != nil {
			return res, err
		}
		send = classify(cov, ids, res.Outside)
	}
	fresh, err := in.insert(ctx, tx, send)
	if isCheckViolation(err) {
		// The window shrank under us: a partition was detached after the
		// cache was read. Re-read it and try the ids still inside once.
		if cov, err = in.coverage(ctx, tx, true); err != nil {
			return res, err
		}
		send = classify(cov, ids, res.Outside)
		fresh, err = in.insert(ctx, tx, send)
	}
	res.Window = cov.window()
	if err != nil {
		return res, fmt.Errorf("inserting %d event ids into %s: %w", len(send), in.table, err)
	}
	seen := make(map[uuid.UUID]bool, len(fresh))
	for i, id := range ids {
		if fresh[id] && !seen[id] {
			res.Fresh[i] = true
		}
		seen[id] = true
	}
	return res, nil
}

// Forget takes id back out of the dedup table inside tx: under
// ScopeConsumerGroup the row of the inserter's group, under ScopeGlobal the
// id's row whichever group wrote it. It is for an event inserted earlier in
// the same transaction whose processing was given up (a handler that kept
// failing), so that a later replay of it is not skipped as a duplicate; the
// row then never becomes visible to others. An id without a row (or outside
// the window) is not an error. Retention is by dropping partitions, never
// by Forget.
func (in *Inserter) Forget(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	if tx == nil {
		return errors.New("forgetting event id: nil transaction")
	}
	var err error
	if in.table.Scope == ScopeConsumerGroup {
		_, err = tx.Exec(ctx, in.forgetSQL, id, in.group)
	} else {
		_, err = tx.Exec(ctx, in.forgetSQL, id)
	}
	if err != nil {
		return fmt.Errorf("forgetting event id %s in %s: %w", id, in.table, err)
	}
	return nil
}

// classify marks the ids without a partition and returns the others, unique
// and sorted.
func classify(cov coverage, ids []uuid.UUID, outside []bool) []pgtype.UUID {
	set := make(map[uuid.UUID]struct{}, len(ids))
	for i, id := range ids {
		outside[i] = !cov.contains(id)
		if !outside[i] {
			set[id] = struct{}{}
		}
	}
	send := make([]pgtype.UUID, 0, len(set))
	for id := range set {
		send = append(send, pgtype.UUID{Bytes: id, Valid: true})
	}
	sort.Slice(send, func(i, j int) bool { return lessUUID(send[i].Bytes, send[j].Bytes) })
	return send
}

func uniqueCount(ids []uuid.UUID) int {
	set := make(map[uuid.UUID]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	return len(set)
}

const insertSavepoint = "idempotency_dedup_insert"

// insert runs the statement under a savepoint, pipelined with it in one
// round trip, and returns the ids inserted now.
func (in *Inserter) insert(ctx context.Context, tx pgx.Tx, send []pgtype.UUID) (map[uuid.UUID]bool, error) {
	fresh := make(map[uuid.UUID]bool, len(send))
	if len(send) == 0 {
		return fresh, nil
	}
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + insertSavepoint)
	b.Queue(in.insertSQL, send, in.group)
	b.Queue("RELEASE SAVEPOINT " + insertSavepoint)
	br := tx.SendBatch(ctx, b)
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var id pgtype.UUID
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			fresh[id.Bytes] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = br.Exec()
		return err
	}()
	if err := closeSavepointBatch(ctx, tx, br, insertSavepoint, err); err != nil {
		return nil, err
	}
	return fresh, nil
}

// closeSavepointBatch closes br, a batch that began with SAVEPOINT
// savepoint, and returns the first error (err, else Close's). After a
// server-side error it rolls back to the savepoint, undoing the failed
// statement only and leaving the caller's transaction usable, and releases
// it so none accumulate. (A connection error leaves nothing to roll back.)
func closeSavepointBatch(ctx context.Context, tx pgx.Tx, br pgx.BatchResults, savepoint string, err error) error {
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	// Not under ctx alone: a cancelled ctx that the server reported as a
	// cancelled statement (57014) must still get its savepoint undone.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rb := "ROLLBACK TO SAVEPOINT " + savepoint + "; RELEASE SAVEPOINT " + savepoint
	if rerr := tx.Conn().PgConn().Exec(rctx, rb).Close(); rerr != nil {
		return fmt.Errorf("rolling back to savepoint: %w (after %w)", rerr, err)
	}
	return err
}

// coverage returns the cached partition ranges, re-reading them from
// pg_catalog through tx when forced, never loaded, or older than the refresh
// interval. A routine re-read that cannot get its locks within the refresh
// lock timeout keeps the cached ranges and is retried a second later.
func (in *Inserter) coverage(ctx context.Context, tx pgx.Tx, force bool) (coverage, error) {
	in.mu.Lock()
	cov, loaded := in.cov, in.loadedAt
	in.mu.Unlock()
	if !force && !loaded.IsZero() && in.now().Sub(loaded) < in.refreshEvery {
		return cov, nil
	}
	fresh, err := in.loadCoverage(ctx, tx)
	if err != nil {
		if !force && !loaded.IsZero() && errors.Is(err, ErrLockNotAvailable) {
			in.mu.Lock()
			in.loadedAt = in.now().Add(min(missRefreshInterval, in.refreshEvery) - in.refreshEvery)
			in.mu.Unlock()
			return cov, nil
		}
		return coverage{}, err
	}
	in.mu.Lock()
	in.cov, in.loadedAt = fresh, in.now()
	in.mu.Unlock()
	return fresh, nil
}

func (in *Inserter) age() time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.now().Sub(in.loadedAt)
}

const windowSavepoint = "idempotency_dedup_window"

// loadCoverage runs the window query inside tx under a savepoint with the
// refresh lock timeout, in one round trip. The savepoint is rolled back
// after the rows are read (or the query failed), which also undoes the SET
// LOCAL, so tx keeps its own lock_timeout and stays usable.
func (in *Inserter) loadCoverage(ctx context.Context, tx pgx.Tx) (coverage, error) {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + windowSavepoint)
	b.Queue(fmt.Sprintf("SET LOCAL lock_timeout = %d", in.lockTimeout.Milliseconds()))
	b.Queue(coverageSQL, in.table.Schema, in.table.Name)
	b.Queue("ROLLBACK TO SAVEPOINT " + windowSavepoint)
	b.Queue("RELEASE SAVEPOINT " + windowSavepoint)
	br := tx.SendBatch(ctx, b)
	var cov coverage
	err := func() error {
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if cov, err = scanCoverage(rows, in.table); err != nil {
			return err
		}
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	}()
	err = closeSavepointBatch(ctx, tx, br, windowSavepoint, err)
	if err == nil {
		return cov, nil
	}
	if isLockTimeout(err) {
		return coverage{}, &LockError{Op: fmt.Sprintf("reading the dedup window of %s (a partition is locked exclusively)", in.table), Attempts: 1, Err: err}
	}
	if errors.Is(err, ErrTableNotFound) {
		return coverage{}, err
	}
	return coverage{}, fmt.Errorf("reading the dedup window of %s: %w", in.table, err)
}

// coverageSQL reads the partitions that accept rows (attached, not pending
// detach) of table $1.$2, with one row of NULLs for a table without any.
// pg_get_expr, which renders a partition's bounds, takes ACCESS SHARE on
// that partition (PostgreSQL 15.18, checked). Maintenance takes ACCESS
// EXCLUSIVE only on tables not yet attached, pending detach or detached,
// which this query does not read, so it does not wait on maintenance; it
// would wait behind another session's ACCESS EXCLUSIVE on an attached
// partition (a VACUUM FULL, a plain DETACH), which the refresh lock timeout
// bounds.
const coverageSQL = `
SELECT c.relname::text, pg_catalog.pg_get_expr(c.relpartbound, c.oid)
  FROM pg_class p
  JOIN pg_namespace n ON n.oid = p.relnamespace
  LEFT JOIN pg_inherits i ON i.inhparent = p.oid AND NOT i.inhdetachpending
  LEFT JOIN pg_class c ON c.oid = i.inhrelid
 WHERE n.nspname = $1 AND p.relname = $2`

// scanCoverage reads the rows of coverageSQL; no row at all means no table
// (ErrTableNotFound, wrapped).
func scanCoverage(rows pgx.Rows, t Table) (coverage, error) {
	defer rows.Close()
	found := false
	var parts []ObservedPartition
	for rows.Next() {
		found = true
		var name, bound *string
		if err := rows.Scan(&name, &bound); err != nil {
			return coverage{}, err
		}
		if name == nil || bound == nil {
			continue // table without partitions
		}
		p := ObservedPartition{Name: *name}
		if err := parseBound(&p, *bound); err != nil {
			return coverage{}, err
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return coverage{}, err
	}
	if !found {
		return coverage{}, fmt.Errorf("reading the dedup window of %s: %w", t, ErrTableNotFound)
	}
	return newCoverage(parts), nil
}

// isCheckViolation reports SQLSTATE 23514, which an insert gets for a row
// that no partition accepts ("no partition of relation ... found for row").
func isCheckViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514"
}
