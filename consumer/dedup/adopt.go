package dedup

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// AdoptResult reports what Adopt did.
type AdoptResult struct {
	// Created: the table did not exist and was created for the new owner
	// (as EnsureTable would).
	Created bool
	// Adopted: the table's marker named the previous owner and now names
	// the new one.
	Adopted bool
	// Partitions names the partitions (attached, pending detach, or
	// standalone tables left by an interrupted run) whose markers were
	// rewritten from the previous owner to the new one, in name order.
	Partitions []string
}

// Adopt is EnsureTable for an owner that takes the table over from a
// previous owner, from: a table whose marker names from (and whose layout
// matches) is given to owner; anything else is handled as EnsureTable
// handles it.
//
//   - The marker names from: the layout is checked first (*LayoutError,
//     nothing changed), then the markers of the table and of its partitions
//     that name from (attached, pending detach, and the standalone tables
//     an interrupted run left, which Maintain then recognises) are rewritten
//     to name owner, in one transaction under the table's advisory lock. A
//     crash or an error at any point rolls all of it back, so the next call
//     starts over from the same state. COMMENT takes SHARE UPDATE EXCLUSIVE
//     on each table, which inserts do not wait for; a busy lock is retried
//     like the other DDL, then reported as a *LockError.
//   - The marker already names owner (adopted before, or created by owner):
//     the layout is checked, and any partition marker still naming from (a
//     table marker rewritten by hand) is rewritten; otherwise nothing
//     changes, so calling Adopt again is harmless.
//   - The table does not exist: it is created for owner.
//   - No marker, or a third owner's: *OwnershipError with AdoptFrom set;
//     nothing changes. A table without a marker is never adopted.
//   - A marker of a newer layout version than this build knows:
//     *LayoutVersionError; nothing changes. An older version is migrated
//     by the next EnsureTable or Maintain.
//
// Adopting is a decision for whoever knows the previous owner is gone for
// good: two processes (two clusters) may share a database, and the previous
// owner's maintenance stops working once its marker is gone.
func (e *Engine) Adopt(ctx context.Context, owner, from string) (AdoptResult, error) {
	res, err := e.adopt(ctx, owner, from)
	if err == nil {
		err = e.ensurePositions(ctx) // positions.go; it follows the dedup table's owner
	}
	if err == nil {
		err = e.ensureClaim(ctx) // claim.go
	}
	if err == nil {
		e.setOwner(owner)
	}
	return res, err
}

func (e *Engine) adopt(ctx context.Context, owner, from string) (AdoptResult, error) {
	var res AdoptResult
	if err := ValidateOwner(owner); err != nil {
		return res, fmt.Errorf("adopting table %s: %w", e.table, err)
	}
	if err := ValidateOwner(from); err != nil {
		return res, fmt.Errorf("adopting table %s: previous owner: %w", e.table, err)
	}
	if from == owner {
		return res, e.EnsureTable(ctx, owner)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return res, fmt.Errorf("adopting table %s: %w", e.table, err)
	}
	defer release()
	// Each attempt reads the table again: what a busy lock interrupted was
	// rolled back, and the markers may have changed meanwhile.
	err = e.retryOnLock(ctx, func() error {
		res = AdoptResult{}
		return e.adoptOnce(ctx, conn, owner, from, &res)
	})
	return res, err
}

// adoptOnce is one attempt of adopt on the session's connection; a busy lock
// while rewriting the markers is a *lockBusy, for retryOnLock.
func (e *Engine) adoptOnce(ctx context.Context, conn *pgx.Conn, owner, from string, res *AdoptResult) error {
	st, err := e.observe(ctx, conn)
	if err != nil {
		return fmt.Errorf("adopting table %s: %w", e.table, err)
	}
	if !st.Exists {
		if err := e.createTable(ctx, conn, owner); err != nil {
			return e.creationErr("adopting", err)
		}
		res.Created = true
		return nil
	}
	switch st.Owner {
	case owner, from:
	default:
		return &OwnershipError{Table: e.table.String(), Owner: st.Owner, AdoptFrom: from}
	}
	if err := e.checkVersion(st); err != nil {
		return err
	}
	if err := e.checkLayout(ctx, conn, st); err != nil {
		return err
	}
	parts, err := e.markedPartitions(ctx, conn, st, from)
	if err != nil {
		return fmt.Errorf("adopting table %s: %w", e.table, err)
	}
	adoptTable := st.Owner == from
	if !adoptTable && len(parts) == 0 {
		return nil // already ours: nothing to do
	}
	err = e.rewriteMarkers(ctx, conn, st.Marker, owner, from, parts, adoptTable)
	if err != nil {
		return statementErr("rewriting the ownership markers of "+e.table.String(), err)
	}
	res.Adopted = adoptTable
	for _, p := range parts {
		res.Partitions = append(res.Partitions, p.Name)
	}
	return nil
}

// rewriteMarkers gives the partitions' markers (and, with table, the
// table's) to owner in one transaction, the table's last. Any error rolls
// the transaction back; the connection is discarded by the session's
// release if the rollback cannot be sent.
func (e *Engine) rewriteMarkers(ctx context.Context, conn *pgx.Conn, tm Marker, owner, from string, parts []Partition, table bool) (err error) {
	if err := e.exec(ctx, conn, "BEGIN"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = e.exec(ctx, conn, "ROLLBACK")
		}
	}()
	for _, p := range parts {
		lo, hi := p.Bounds()
		marker, err := jsonLiteral(partitionMarker{PartitionOf: e.table.String(), Owner: owner, From: lo.String(), To: hi.String()})
		if err != nil {
			return err
		}
		child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
		if err := e.exec(ctx, conn, "COMMENT ON TABLE "+child+" IS "+marker); err != nil {
			return fmt.Errorf("partition %s: %w", p.Name, err)
		}
		if err := e.step(ctx, StepMarkerRewritten, p.Name); err != nil {
			return err
		}
	}
	if table {
		tm.Owner, tm.AdoptedFrom = owner, from
		marker, err := jsonLiteral(tm)
		if err != nil {
			return err
		}
		if err := e.exec(ctx, conn, "COMMENT ON TABLE "+e.parent()+" IS "+marker); err != nil {
			return fmt.Errorf("table %s: %w", e.table, err)
		}
		if err := e.step(ctx, StepTableAdopted, e.table.Name); err != nil {
			return err
		}
	}
	return e.exec(ctx, conn, "COMMIT")
}
