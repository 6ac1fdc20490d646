package main

import (
	"context"
	"fmt"
	"strconv"

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
	return v
}

// verifyHTTP checks the HTTP group against the provider's record, its
// dead-letter topic and its dedup rows. It runs after verify, whose view of
// the topic it reuses.
func (r *Result) verifyHTTP(ctx context.Context, brokers []string, dbURL string, p *provider, txns *txnLog) error {
	counts, requests, drops, noKey := p.snapshot()
	r.ProviderRequests, r.ProviderDrops, r.ProviderNoKey = requests, drops, noKey

	// Ids the HTTP group dead-lettered, by the dead letter's header or, for
	// a message whose id header is absent, by its original position.
	r.HTTPDLQByReason = map[string]int{}
	deadLettered := map[uuid.UUID]bool{}
	err := readAll(ctx, brokers, httpDLQTopic, 0, func(m kafka.Message) {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		r.HTTPDLQ++
		r.HTTPDLQByReason[h[consumer.HeaderDLQReason]]++
		if id, err := uuid.Parse(h[consumer.HeaderDLQEventID]); err == nil {
			deadLettered[id] = true
			return
		}
		part, _ := strconv.ParseInt(h[consumer.HeaderDLQOriginalPartition], 10, 64)
		off, _ := strconv.ParseInt(h[consumer.HeaderDLQOriginalOffset], 10, 64)
		if msg, ok := r.positions[[2]int64{part, off}]; ok && msg.valid {
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
	rows, err := conn.Query(ctx, `SELECT event_id, count(*) FROM `+table+` WHERE consumer_group = $1 GROUP BY event_id`, httpGroup)
	if err != nil {
		return fmt.Errorf("reading the HTTP group's dedup rows: %w", err)
	}
	recorded := map[uuid.UUID]bool{}
	for rows.Next() {
		var id uuid.UUID
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return fmt.Errorf("reading the HTTP group's dedup rows: %w", err)
		}
		r.HTTPDedupRowsPerIDMax = max(r.HTTPDedupRowsPerIDMax, n)
		recorded[id] = true
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
	return nil
}

// dedupTableName is the dedup table both groups share (cmd/consumer's default).
const dedupTableName = "processed_event"
