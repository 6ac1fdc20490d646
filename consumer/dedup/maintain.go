package dedup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Maintain brings the partitions in line with the table's Policy of premake
// and retention (Policy.Plan at now): creates missing partitions (the
// current and future ones first, adopting a standalone table left by an
// interrupted run), completes interrupted detaches, drops expired partitions
// and leftover detached tables, without ever taking a lock that blocks
// inserts. A table of an older layout version is migrated first (as by
// EnsureTable); one of a newer version is refused with *LayoutVersionError
// and left untouched. It stops at the first step that fails and returns what it did so
// far; a *LockError (IsRetryable) means a lock stayed busy: run it again
// later.
func (e *Engine) Maintain(ctx context.Context, now time.Time, premake int, retention time.Duration) (Result, error) {
	var res Result
	policy := Policy{Interval: e.table.Interval, Premake: premake, Retention: retention}
	if err := policy.Validate(); err != nil {
		return res, fmt.Errorf("maintaining %s: %w", e.table, err)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return res, fmt.Errorf("maintaining %s: %w", e.table, err)
	}
	defer release()
	err = e.maintain(ctx, conn, now, policy, &res)
	byFrom := func(a, b Partition) int { return a.From.Compare(b.From) }
	slices.SortFunc(res.Created, byFrom)
	slices.SortFunc(res.Dropped, byFrom)
	// Report the window as it is now, also after a failed step.
	if st, oerr := e.observe(ctx, conn); oerr == nil {
		res.Window, res.Partitions, res.Foreign = st.Window, st.Partitions, st.Foreign
	}
	if err != nil {
		return res, fmt.Errorf("maintaining %s: %w", e.table, err)
	}
	return res, nil
}

func (e *Engine) maintain(ctx context.Context, conn *pgx.Conn, now time.Time, policy Policy, res *Result) error {
	st, err := e.observeOwned(ctx, conn)
	if err != nil {
		return err
	}
	if _, err := e.migrateLayout(ctx, conn, st); err != nil {
		return err // a newer layout is refused before any partition is touched
	}
	if policy, err = e.sharedPolicy(ctx, conn, st, policy); err != nil { // registry.go: a shared table's longest retention and largest premake
		return err
	}
	plan := policy.Plan(now, e.table.Name, st.Partitions)
	orphans := make(map[string]bool)
	for _, o := range st.Orphans {
		orphans[o.Name] = true
	}

	// A table without any partition (just created) gets its first ones
	// several to a transaction: one commit instead of two per partition
	// (make bench: a new object's first partitions took about 60% of the
	// time).
	if len(st.Partitions) == 0 && len(st.Orphans) == 0 && len(plan.Create) > 1 {
		created, err := e.createFirstPartitions(ctx, conn, createOrder(plan.Create, e.table.Interval.Floor(now)), st.Owner)
		res.Created = append(res.Created, created...)
		if err != nil {
			return err
		}
		plan.Create = nil
	}

	// Creating comes first: a missing current or next partition makes
	// inserts fail, an expired one only costs disk.
	for _, p := range createOrder(plan.Create, e.table.Interval.Floor(now)) {
		if err := e.createPartition(ctx, conn, p, st.Owner, orphans[p.Name]); err != nil {
			return err
		}
		delete(orphans, p.Name)
		res.Created = append(res.Created, p)
	}

	// A kept partition of ours left pending detach (a detach interrupted
	// after its first transaction, under another retention) is completed
	// and attached again, so its range accepts inserts.
	for _, p := range st.Partitions {
		if !p.DetachPending {
			continue
		}
		own, ok := ownPartition(p, e.table.Interval, e.table.Name)
		if !ok || slices.ContainsFunc(plan.Drop, func(d Partition) bool { return d.Name == own.Name }) {
			continue
		}
		if err := e.detach(ctx, conn, own); err != nil {
			return err
		}
		res.Finalized = append(res.Finalized, own.Name)
		if err := e.createPartition(ctx, conn, own, st.Owner, true); err != nil {
			return err
		}
		res.Created = append(res.Created, own)
	}

	for _, p := range plan.Drop {
		if keep, err := e.keepPartition(ctx, conn, p); err != nil || keep { // kind.go
			if err != nil {
				return err
			}
			continue
		}
		pending := slices.ContainsFunc(st.Partitions, func(o ObservedPartition) bool { return o.Name == p.Name && o.DetachPending })
		if err := e.detach(ctx, conn, p); err != nil {
			return err
		}
		if pending {
			res.Finalized = append(res.Finalized, p.Name)
		}
		if err := e.dropDetached(ctx, conn, p); err != nil {
			return err
		}
		res.Dropped = append(res.Dropped, p)
	}

	// Leftovers of an interrupted drop (detached, not dropped) go once
	// expired; a standalone table still inside the window was adopted above.
	keepFrom := now.Add(-policy.Retention)
	for _, o := range st.Orphans {
		if !orphans[o.Name] || o.To.After(keepFrom) {
			continue
		}
		if err := e.dropDetached(ctx, conn, o); err != nil {
			return err
		}
		res.Dropped = append(res.Dropped, o)
	}
	return nil
}

// createOrder puts the slots from the current one onwards first (ascending),
// then the older ones, newest first.
func createOrder(ps []Partition, current time.Time) []Partition {
	var ahead, behind []Partition
	for _, p := range ps {
		if p.From.Before(current) {
			behind = append(behind, p)
		} else {
			ahead = append(ahead, p)
		}
	}
	slices.Reverse(behind)
	return append(ahead, behind...)
}

const boundsConstraint = "idempotency_bounds"

// createPartition creates p as a standalone table (or adopts the standalone
// table an interrupted run left) and attaches it. The CHECK constraint
// matching the bounds lets ATTACH skip the validation scan; it is kept
// afterwards so a detached table stays self-describing and can be attached
// again without a scan.
func (e *Engine) createPartition(ctx context.Context, conn *pgx.Conn, p Partition, owner string, adopt bool) error {
	child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
	if adopt {
		var has bool
		qctx, cancel := e.bounded(ctx)
		err := conn.QueryRow(qctx, `SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = $1::regclass AND conname = $2 AND contype = 'c')`,
			child, boundsConstraint).Scan(&has)
		cancel()
		if err != nil {
			return fmt.Errorf("inspecting standalone table %s: %w", p.Name, err)
		}
		if !has {
			sql := fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`, child, boundsConstraint, boundsCheck(p))
			if err := e.ddl(ctx, conn, "adding bounds to standalone table "+p.Name, sql); err != nil {
				return err
			}
		}
	} else {
		sql, err := e.createChildSQL(p, owner)
		if err != nil {
			return err
		}
		if err := e.ddl(ctx, conn, "creating table for partition "+p.Name, sql); err != nil {
			if isNameTaken(err) {
				// Not an orphan of ours (observe would have adopted it):
				// someone else's relation or type has the partition's name.
				kind, of, lerr := e.nameTaken(ctx, conn, p.Name)
				if lerr == nil && kind != "" {
					return &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + p.Name, Kind: kind, Of: of,
						Need: "partition " + p.Name + " for [" + p.From.UTC().Format(time.RFC3339) + ", " + p.To.UTC().Format(time.RFC3339) + ")"}
				}
			}
			return err
		}
	}
	if err := e.step(ctx, StepCreated, p.Name); err != nil {
		return err
	}
	if err := e.ddl(ctx, conn, "attaching partition "+p.Name, e.attachSQL(p)); err != nil {
		return err
	}
	return e.step(ctx, StepAttached, p.Name)
}

// firstPartitionsPerTransaction bounds how many of a new table's first
// partitions one transaction creates. Each holds five locks until the
// transaction ends (the table, its two indexes, the parent's), and the
// server's shared lock table is sized for max_locks_per_transaction (default
// 64) per connection: some 2,000 Hourly partitions in one transaction hold
// 10,000 locks, and a few such tables at once ran it out of shared memory
// (SQLSTATE 53200) on every run, for the server's other clients too.
// Sixteen hold some 80, a small share of that table even with every
// reconcile worker at it at once, run well within one statement deadline
// (bounded), and still make the default Daily window (12 partitions) in one
// transaction.
const firstPartitionsPerTransaction = 16

// createFirstPartitions creates and attaches ps, the first partitions of a
// table that has none, with createPartition's statements, up to
// firstPartitionsPerTransaction in each transaction: ps in createOrder, so
// the first transaction makes the current and next ones. After a failure or
// a crash the table has none or some of them, and the next run creates the
// rest one at a time as for any table. ATTACH takes SHARE UPDATE EXCLUSIVE
// on the table, as one at a time would, for the transaction's length; a
// table without partitions takes no inserts to block. A name that is taken
// makes its transaction fail; those partitions and the rest are then
// created one at a time, which names what is in the way
// (*NameConflictError). It returns the partitions it made, also after a
// failure.
func (e *Engine) createFirstPartitions(ctx context.Context, conn *pgx.Conn, ps []Partition, owner string) ([]Partition, error) {
	var created []Partition
	for len(ps) > 0 {
		batch := ps[:min(len(ps), firstPartitionsPerTransaction)]
		var b strings.Builder
		for _, p := range batch {
			sql, err := e.createChildSQL(p, owner)
			if err != nil {
				return created, err
			}
			b.WriteString(sql + ";\n" + e.attachSQL(p) + ";\n")
		}
		err := e.ddl(ctx, conn, fmt.Sprintf("creating partitions %s to %s", batch[0].Name, batch[len(batch)-1].Name), b.String())
		if isNameTaken(err) {
			for _, p := range ps {
				if err := e.createPartition(ctx, conn, p, owner, false); err != nil {
					return created, err
				}
				created = append(created, p)
			}
			return created, nil
		}
		if err != nil {
			return created, err
		}
		created = append(created, batch...)
		for _, p := range batch {
			if err := e.step(ctx, StepAttached, p.Name); err != nil {
				return created, err
			}
		}
		ps = ps[len(batch):]
	}
	return created, nil
}

// createChildSQL creates p as a standalone table like the parent (storage
// included: no TOAST table, see createTable), with the CHECK constraint
// matching its bounds, which lets ATTACH skip the validation scan and keeps
// a detached table self-describing, and our partition marker.
func (e *Engine) createChildSQL(p Partition, owner string) (string, error) {
	child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
	lo, hi := p.Bounds()
	marker, err := jsonLiteral(partitionMarker{PartitionOf: e.table.String(), Owner: owner, From: lo.String(), To: hi.String()})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL, CONSTRAINT %s %s);\nCOMMENT ON TABLE %s IS %s",
		child, e.parent(), boundsConstraint, boundsCheck(p), child, marker), nil
}

func boundsCheck(p Partition) string {
	lo, hi := p.Bounds()
	return fmt.Sprintf(`CHECK (event_id >= '%s'::uuid AND event_id < '%s'::uuid)`, lo, hi)
}

func (e *Engine) attachSQL(p Partition) string {
	lo, hi := p.Bounds()
	return fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
		e.parent(), pgx.Identifier{e.table.Schema, p.Name}.Sanitize(), lo, hi)
}

// detach detaches p with DETACH CONCURRENTLY, which takes only SHARE UPDATE
// EXCLUSIVE on the parent and waits for the transactions using the partition
// instead of locking them out. Its second transaction can fail (lock_timeout
// while waiting, a crash); the partition is then left "detach pending" and
// the next attempt completes it with FINALIZE. The state is re-read before
// every attempt, so each attempt does the one statement that is still due.
func (e *Engine) detach(ctx context.Context, conn *pgx.Conn, p Partition) error {
	child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
	return e.retryOnLock(ctx, func() error {
		for {
			rs, err := e.relState(ctx, conn, p.Name)
			if err != nil {
				return err
			}
			var sql, op string
			switch rs {
			case relGone, relStandalone:
				return e.step(ctx, StepDetached, p.Name)
			case relAttached:
				op = "detaching partition " + p.Name
				sql = fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY`, e.parent(), child)
			case relDetachPending:
				op = "finalizing the detach of partition " + p.Name
				sql = fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s FINALIZE`, e.parent(), child)
			}
			if err := e.exec(ctx, conn, sql); err != nil {
				return statementErr(op, err)
			}
			// Done: the next round reads it back as standalone.
		}
	})
}

// dropDetached drops p once it is a standalone table; an attached one is
// never dropped here (DROP of a partition locks the parent).
func (e *Engine) dropDetached(ctx context.Context, conn *pgx.Conn, p Partition) error {
	rs, err := e.relState(ctx, conn, p.Name)
	if err != nil {
		return err
	}
	switch rs {
	case relGone:
		return e.step(ctx, StepDropped, p.Name)
	case relAttached, relDetachPending:
		return fmt.Errorf("dropping %s: it is still a partition", p.Name)
	}
	sql := "DROP TABLE " + pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
	if err := e.ddl(ctx, conn, "dropping detached table "+p.Name, sql); err != nil {
		return err
	}
	return e.step(ctx, StepDropped, p.Name)
}
