package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// httpViolations lists the broken invariants of the HTTP group: every id that
// should take effect reached the provider, every request carried its key, no
// id of an aborted transaction was called or recorded, and every id was
// recorded once (or dead-lettered), and only after it was called.
func (r *Result) httpViolations() []string {
	var v []string
	if r.ProviderRequests == 0 || r.HTTPRecorded == 0 {
		v = append(v, fmt.Sprintf("HTTP group: the provider got %d requests and %d ids were recorded: nothing to check", r.ProviderRequests, r.HTTPRecorded))
	}
	if r.ProviderMissing != 0 {
		v = append(v, fmt.Sprintf("HTTP group: %d ids never reached the provider", r.ProviderMissing))
	}
	if r.HTTPDedupRowsPerIDMax > 1 {
		v = append(v, fmt.Sprintf("HTTP group: an id has %d dedup rows", r.HTTPDedupRowsPerIDMax))
	}
	if r.ProviderNoKey != 0 {
		v = append(v, fmt.Sprintf("HTTP group: %d requests without an Idempotency-Key", r.ProviderNoKey))
	}
	if r.ProviderAborted != 0 {
		v = append(v, fmt.Sprintf("HTTP group: %d ids of aborted transactions called or recorded", r.ProviderAborted))
	}
	if r.ProviderUnknown != 0 {
		v = append(v, fmt.Sprintf("HTTP group: the provider got %d keys that are no valid event id", r.ProviderUnknown))
	}
	if r.HTTPRecordedNotCalled != 0 {
		v = append(v, fmt.Sprintf("HTTP group: %d ids recorded without a call", r.HTTPRecordedNotCalled))
	}
	if r.HTTPUnrecorded != 0 {
		v = append(v, fmt.Sprintf("HTTP group: %d valid ids neither recorded nor dead-lettered at lag zero", r.HTTPUnrecorded))
	}
	if r.HTTPMalformedMissing != 0 {
		v = append(v, fmt.Sprintf("HTTP group: %d malformed messages missing from its dead-letter topic", r.HTTPMalformedMissing))
	}
	if r.HTTPSnapshots == 0 {
		v = append(v, "HTTP group: no committed-offset snapshot was taken")
	}
	for _, s := range r.HTTPOffsetViolations {
		v = append(v, "HTTP group: "+s)
	}
	return v
}

// verifyHTTP checks the HTTP group against the provider's record, its
// dead-letter topic and its dedup rows. It runs after verify, whose view of
// the topic it reuses.
func (r *Result) verifyHTTP(ctx context.Context, brokers []string, dbURL string, p *provider, snapshots []offsetSnapshot, txns *txnLog) error {
	counts, requests, drops, noKey := p.snapshot()
	r.ProviderRequests, r.ProviderDrops, r.ProviderNoKey = requests, drops, noKey

	// Ids the HTTP group dead-lettered, by the dead letter's header or, for
	// a message whose id header is absent, by its original position.
	r.HTTPDLQByReason = map[string]int{}
	deadLettered := map[uuid.UUID]bool{}
	dlqAt := map[[2]int64]time.Time{} // the earliest dead letter of each original position
	err := readAll(ctx, brokers, httpDLQTopic, 0, func(m kafka.Message) {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		r.HTTPDLQ++
		r.HTTPDLQByReason[h[consumer.HeaderDLQReason]]++
		part, _ := strconv.ParseInt(h[consumer.HeaderDLQOriginalPartition], 10, 64)
		off, _ := strconv.ParseInt(h[consumer.HeaderDLQOriginalOffset], 10, 64)
		pos := [2]int64{part, off}
		at := m.Time
		if t, err := time.Parse(time.RFC3339Nano, h[consumer.HeaderDLQTime]); err == nil {
			at = t
		}
		if prev, ok := dlqAt[pos]; !ok || at.Before(prev) {
			dlqAt[pos] = at
		}
		if id, err := uuid.Parse(h[consumer.HeaderDLQEventID]); err == nil {
			deadLettered[id] = true
		} else if msg, ok := r.positions[pos]; ok && msg.valid {
			deadLettered[msg.id] = true
		}
	})
	if err != nil {
		return err
	}

	called := map[uuid.UUID]bool{}
	for key, n := range counts {
		r.ProviderRequestsPerIDMax = max(r.ProviderRequestsPerIDMax, n)
		if n > 1 {
			r.ProviderRepeated++
		}
		id, err := uuid.Parse(key)
		switch {
		case err != nil:
			r.ProviderUnknown++
		case r.abortedIDs[id]:
			r.ProviderAborted++
		case !r.validIDs[id]:
			r.ProviderUnknown++
		default:
			called[id] = true
		}
	}

	// The HTTP group's dedup rows (the table is scoped by consumer group).
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	table := pgx.Identifier{"public", dedupTableName}.Sanitize()
	rows, err := conn.Query(ctx, `SELECT event_id, count(*), min(pg_xact_commit_timestamp(xmin))
		FROM `+table+` WHERE consumer_group = $1 GROUP BY event_id`, httpGroup)
	if err != nil {
		return fmt.Errorf("reading the HTTP group's dedup rows: %w", err)
	}
	recorded := map[uuid.UUID]bool{}
	recordedAt := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var id uuid.UUID
		var n int
		var at *time.Time
		if err := rows.Scan(&id, &n, &at); err != nil {
			return fmt.Errorf("reading the HTTP group's dedup rows: %w", err)
		}
		r.HTTPDedupRowsPerIDMax = max(r.HTTPDedupRowsPerIDMax, n)
		recorded[id] = true
		if at != nil {
			recordedAt[id] = *at
		}
		switch {
		case r.abortedIDs[id]:
			r.ProviderAborted++
		case !r.validIDs[id]:
			r.ProviderUnknown++
		case !called[id]:
			r.HTTPRecordedNotCalled++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the HTTP group's dedup rows: %w", err)
	}
	r.HTTPRecorded, r.ProviderIDs = len(recorded), len(counts)

	for id := range r.validIDs {
		if deadLettered[id] || txns.unknown[id] {
			continue // should not (or may not) take effect
		}
		if !called[id] {
			r.ProviderMissing++
		}
		if !recorded[id] {
			r.HTTPUnrecorded++
		}
	}

	// Malformed messages dead-lettered; no offset committed ahead of the
	// dedup row (or dead letter) of a message below it.
	for _, msgs := range r.byPartition {
		for _, m := range msgs {
			if !m.valid && !m.aborted {
				if _, ok := dlqAt[[2]int64{int64(m.partition), m.offset}]; !ok {
					r.HTTPMalformedMissing++
				}
			}
		}
	}
	r.HTTPSnapshots = len(snapshots)
	doneAt := func(m message) (time.Time, bool) {
		if m.aborted {
			return time.Time{}, true
		}
		if m.valid {
			if at, ok := recordedAt[m.id]; ok {
				return at, true
			}
		}
		if at, ok := dlqAt[[2]int64{int64(m.partition), m.offset}]; ok {
			return at, true
		}
		return time.Time{}, m.valid && txns.unknown[m.id]
	}
	// A record whose id also occurs on another partition can be skipped as
	// a duplicate once the other record's call succeeded, before that
	// record's dedup row commits (claims.go): its offset may then run ahead
	// of the dedup row, not of the effect (the other partition's offset
	// waits for the row, and a crash redoes that call). That is reported
	// apart (strict check); the failing check counts such a record done if
	// its id is recorded at all by the end.
	partitionsOf := map[uuid.UUID]map[int]bool{}
	for _, msgs := range r.byPartition {
		for _, m := range msgs {
			if m.valid {
				if partitionsOf[m.id] == nil {
					partitionsOf[m.id] = map[int]bool{}
				}
				partitionsOf[m.id][m.partition] = true
			}
		}
	}
	r.HTTPOffsetAheadOfOwner = checkOffsets(r.byPartition, doneAt, snapshots)
	r.HTTPOffsetViolations = checkOffsets(r.byPartition, func(m message) (time.Time, bool) {
		if _, ok := recordedAt[m.id]; ok && m.valid && len(partitionsOf[m.id]) > 1 {
			return time.Time{}, true
		}
		return doneAt(m)
	}, snapshots)
	// Say where each late id occurs in the topic: a duplicate whose first
	// occurrence is on another partition was skipped as a duplicate there.
	annotate(r.HTTPOffsetViolations, r.byPartition, recordedAt)
	annotate(r.HTTPOffsetAheadOfOwner, r.byPartition, recordedAt)
	return nil
}

// annotate adds to each offset violation where its late id occurs in the
// topic and when it was recorded.
func annotate(violations []string, byPartition [][]message, recordedAt map[uuid.UUID]time.Time) {
	for i, v := range violations {
		_, idText, ok := strings.Cut(v, "first late: offset ")
		if !ok {
			continue
		}
		_, idText, _ = strings.Cut(idText, "id ")
		id, err := uuid.Parse(strings.TrimSuffix(idText, ")"))
		if err != nil {
			continue
		}
		var where []string
		for _, msgs := range byPartition {
			for _, m := range msgs {
				if m.id == id {
					where = append(where, fmt.Sprintf("%d/%d", m.partition, m.offset))
				}
			}
		}
		violations[i] = fmt.Sprintf("%s; the id is at partition/offset %s, recorded at %s",
			v, strings.Join(where, " "), recordedAt[id].Format(time.RFC3339Nano))
	}
}

// dedupTableName is the dedup table both groups share (cmd/consumer's default).
const dedupTableName = "processed_event"
