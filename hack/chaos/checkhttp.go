package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer/sink"
)

// dedupTableName is the dedup table both groups share (cmd/consumer's default).
const dedupTableName = "processed_event"

// verifyHTTP checks the HTTP group against the provider's record, its
// dead-letter topic and its dedup rows. It runs after verify, whose view of
// the topic it reuses.
func (r *Result) verifyHTTP(ctx context.Context, brokers []string, dbURL string, p *provider, snapshots []offsetSnapshot, txns *txnLog) error {
	counts, requests, drops, noKey := p.snapshot()
	r.ProviderRequests, r.ProviderDrops, r.ProviderNoKey, r.ProviderIDs = requests, drops, noKey, len(counts)
	dl, err := readDeadLetters(ctx, brokers, httpDLQTopic)
	if err != nil {
		return err
	}
	r.HTTPDLQ, r.HTTPDLQByReason = len(dl.all), dl.byReason()
	r.ProviderSlow, r.ProviderBusy, r.ProviderLimited = p.faultCounts()
	r.DeadLetteredRetryable = dl.retryable()
	called := r.providerCalls(counts)
	recorded, recordedAt, err := r.readHTTPRecords(ctx, dbURL, called)
	if err != nil {
		return err
	}
	// Ids the HTTP group dead-lettered, by the dead letter's header or, for
	// a message whose id header is absent, by its original position.
	deadLettered := map[uuid.UUID]bool{}
	for _, d := range dl.all {
		if d.hasID {
			deadLettered[d.id] = true
		} else if msg, ok := r.positions[d.pos]; ok && msg.valid {
			deadLettered[msg.id] = true
		}
	}
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
	// Malformed messages dead-lettered (with any reason: the SQL group's check
	// covers the reasons).
	r.HTTPMalformedMissing, _ = dl.malformed(r.byPartition)
	r.HTTPSnapshots = len(snapshots)
	r.checkHTTPOffsets(snapshots, recordedAt, dl, txns)
	return nil
}

// httpStatusInError finds the status of an HTTP sink's error text
// ("HTTP 409", "retry after 2s: HTTP 429: ...").
var httpStatusInError = regexp.MustCompile(`\bHTTP ([1-5][0-9][0-9])\b`)

// retryable counts the dead letters whose reason was an answer the HTTP
// sink retries (sink.DefaultRetryableStatuses): each is an event given up
// on that the provider would have applied.
func (dl deadLetters) retryable() int {
	n := 0
	for _, d := range dl.all {
		m := httpStatusInError.FindStringSubmatch(d.err)
		if m == nil {
			continue
		}
		st, _ := strconv.Atoi(m[1])
		if slices.Contains(sink.DefaultRetryableStatuses, st) {
			n++
		}
	}
	return n
}

// providerCalls counts the provider's requests per key and returns the valid
// ids it was called for.
func (r *Result) providerCalls(counts map[string]int) map[uuid.UUID]bool {
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
	return called
}

// readHTTPRecords reads the HTTP group's dedup rows (the table is scoped by
// consumer group): the ids recorded, and when each first row committed.
func (r *Result) readHTTPRecords(ctx context.Context, dbURL string, called map[uuid.UUID]bool) (map[uuid.UUID]bool, map[uuid.UUID]time.Time, error) {
	table := pgx.Identifier{"public", dedupTableName}.Sanitize()
	rows, err := queryIDRows(ctx, dbURL, "the HTTP group's dedup rows", `SELECT event_id, count(*), 0::bigint, min(pg_xact_commit_timestamp(xmin))
		FROM `+table+` WHERE consumer_group = $1 GROUP BY event_id`, httpGroup)
	if err != nil {
		return nil, nil, err
	}
	recorded := map[uuid.UUID]bool{}
	recordedAt := map[uuid.UUID]time.Time{}
	for _, row := range rows {
		r.HTTPDedupRowsPerIDMax = max(r.HTTPDedupRowsPerIDMax, int(row.n))
		recorded[row.id] = true
		if row.at != nil {
			recordedAt[row.id] = *row.at
		}
		switch {
		case r.abortedIDs[row.id]:
			r.ProviderAborted++
		case !r.validIDs[row.id]:
			r.ProviderUnknown++
		case !called[row.id]:
			r.HTTPRecordedNotCalled++
		}
	}
	r.HTTPRecorded = len(recorded)
	return recorded, recordedAt, nil
}

// checkHTTPOffsets checks that no offset of the HTTP group was committed
// ahead of the dedup row (or dead letter) of a message below it.
func (r *Result) checkHTTPOffsets(snapshots []offsetSnapshot, recordedAt map[uuid.UUID]time.Time, dl deadLetters, txns *txnLog) {
	doneAt := func(m message) (time.Time, bool) {
		if m.aborted {
			return time.Time{}, true
		}
		if m.valid {
			if at, ok := recordedAt[m.id]; ok {
				return at, true
			}
		}
		if d, ok := dl.first[m.pos()]; ok {
			return d.at, true
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
