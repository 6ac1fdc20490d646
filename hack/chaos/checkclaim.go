package main

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// verifyClaim checks the claim clients' group (hack/chaos/claimclient)
// against the topic, its ledger (claim_ledger) and its rows in the dedup
// table, computed from the database and the topic, never from the clients'
// own counts. It runs after verify, whose view of the topic it reuses.
//
// The client skips what it cannot claim (no canonical eventId, not_v7,
// outside_window) rather than dead-letter it, so a malformed record is done
// as soon as it is read; every valid id must have exactly one ledger row,
// committed with its claim: a ledger row without the group's dedup row, or a
// dedup row without a ledger row, is a claim and an effect that did not
// commit together.
func (r *Result) verifyClaim(ctx context.Context, dbURL string, snapshots []offsetSnapshot, txns *txnLog) error {
	rows, err := queryIDRows(ctx, dbURL, "the claim ledger", `SELECT event_id, count(*), sum(amount), min(pg_xact_commit_timestamp(xmin))
		FROM claim_ledger GROUP BY event_id`)
	if err != nil {
		return err
	}
	appliedAt := map[uuid.UUID]time.Time{}
	applied := map[uuid.UUID]bool{}
	for _, row := range rows {
		switch {
		case r.abortedIDs[row.id]:
			r.ClaimAbortedApplied += int(row.n)
			continue
		case !r.validIDs[row.id]:
			r.ClaimUnknownApplied += int(row.n)
			continue
		}
		applied[row.id] = true
		r.ClaimApplied++
		r.ClaimDuplicatesApplied += int(row.n - 1)
		if row.amount != row.n*amountOf(row.id) {
			r.ClaimWrongAmount++
		}
		if row.at != nil {
			appliedAt[row.id] = *row.at
		}
	}
	claimed, err := claimedIDs(ctx, dbURL)
	if err != nil {
		return err
	}
	for id := range claimed {
		if !applied[id] && !r.abortedIDs[id] {
			r.ClaimedNotApplied++
		}
	}
	for id := range applied {
		if !claimed[id] {
			r.ClaimAppliedNotClaimed++
		}
	}
	for id := range r.validIDs {
		if !applied[id] && !txns.unknown[id] {
			r.ClaimLost++
		}
	}
	r.ClaimSnapshots = len(snapshots)
	r.ClaimOffsetViolations = checkOffsets(r.byPartition, func(m message) (time.Time, bool) {
		switch {
		case m.aborted, !m.valid:
			return time.Time{}, true // never handled (read committed) or skipped: nothing to wait for
		}
		if at, ok := appliedAt[m.id]; ok {
			return at, true
		}
		return time.Time{}, txns.unknown[m.id] // maybe aborted: nothing to do
	}, snapshots)
	return nil
}

// claimedIDs reads the claim clients' rows of the dedup table.
func claimedIDs(ctx context.Context, dbURL string) (map[uuid.UUID]bool, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT event_id FROM `+dedupTableName+` WHERE consumer_group = $1`, claimGroup)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}
