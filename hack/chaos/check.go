package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/replay"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
)

// checkPartitions compares the table's partitions with the planner's view
// of what should exist at the final instant.
func (r *Result) checkPartitions(st dedup.State, want dedup.Plan) {
	have := map[string]bool{}
	for _, p := range st.Partitions {
		have[p.Name] = true
	}
	wantNames := map[string]bool{}
	for _, p := range want.Create {
		wantNames[p.Name] = true
		if !have[p.Name] {
			r.PartitionProblems = append(r.PartitionProblems, "planned partition missing: "+p.Name)
		}
	}
	for name := range have {
		if !wantNames[name] {
			r.PartitionProblems = append(r.PartitionProblems, "unplanned partition present: "+name)
		}
	}
	if len(st.Foreign) > 0 {
		r.PartitionProblems = append(r.PartitionProblems, "foreign partitions: "+strings.Join(st.Foreign, ","))
	}
}

type message struct {
	partition int
	offset    int64
	id        uuid.UUID
	valid     bool
	reason    string // expected dead-letter reason for a malformed message
	// aborted: a record of an aborted transaction, which must not be handled.
	aborted bool
}

// classify decides independently of the runtime what a message is.
func classify(value []byte) (uuid.UUID, string) {
	var m map[string]any
	if err := json.Unmarshal(value, &m); err != nil {
		return uuid.Nil, "not_json"
	}
	s, ok := m["eventId"].(string)
	if !ok || s == "" {
		return uuid.Nil, "missing_id"
	}
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return uuid.Nil, "invalid_uuid"
	}
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		return uuid.Nil, "wrong_uuid_version"
	}
	return id, ""
}

// position is a record's original partition and offset.
type position [2]int64

func (m message) pos() position { return position{int64(m.partition), m.offset} }

// deadLetter is one record of a dead-letter topic, read from its headers.
type deadLetter struct {
	reason string
	err    string    // the dlq-error header
	pos    position  // the original record's
	at     time.Time // when it was dead-lettered (the record's time without the header)
	id     uuid.UUID // the event id header's, when hasID
	hasID  bool
	// replayID names the replay that wrote it back (dlq-replay-id).
	replayID string
}

// deadLetters is a dead-letter topic read back.
type deadLetters struct {
	all   []deadLetter
	first map[position]deadLetter // the earliest dead letter of each original position
}

// readDeadLetters reads a dead-letter topic (one partition) back.
func readDeadLetters(ctx context.Context, brokers []string, topic string) (deadLetters, error) {
	dl := deadLetters{first: map[position]deadLetter{}}
	err := localstack.ReadPartition(ctx, brokers, topic, 0, func(m kafka.Message) {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		p, _ := strconv.ParseInt(h[consumer.HeaderDLQOriginalPartition], 10, 64)
		o, _ := strconv.ParseInt(h[consumer.HeaderDLQOriginalOffset], 10, 64)
		d := deadLetter{reason: h[consumer.HeaderDLQReason], err: h[consumer.HeaderDLQError], pos: position{p, o}, at: m.Time,
			replayID: h[replay.HeaderReplayID]}
		if t, err := time.Parse(time.RFC3339Nano, h[consumer.HeaderDLQTime]); err == nil {
			d.at = t
		}
		if id, err := uuid.Parse(h[consumer.HeaderDLQEventID]); err == nil {
			d.id, d.hasID = id, true
		}
		dl.all = append(dl.all, d)
		if prev, ok := dl.first[d.pos]; !ok || d.at.Before(prev.at) {
			dl.first[d.pos] = d
		}
	})
	return dl, err
}

// byReason counts the dead letters by reason.
func (dl deadLetters) byReason() map[string]int {
	n := map[string]int{}
	for _, d := range dl.all {
		n[d.reason]++
	}
	return n
}

// malformed counts the malformed messages (not of aborted transactions) that
// are missing from dl, and those dead-lettered with another reason.
func (dl deadLetters) malformed(byPartition [][]message) (missing, wrong int) {
	for _, msgs := range byPartition {
		for _, m := range msgs {
			if m.valid || m.aborted {
				continue
			}
			d, ok := dl.first[m.pos()]
			switch {
			case !ok:
				missing++
			case d.reason != m.reason:
				wrong++
			}
		}
	}
	return missing, wrong
}

// idRows is a per-id summary of a table: how many rows each id has, the sum
// of their amounts, and when the first of them committed (nil when unknown).
type idRow struct {
	id     uuid.UUID
	n      int64
	amount int64
	at     *time.Time
}

// queryIDRows runs query, which selects (event_id, count, amount, commit
// time) grouped by event_id; what names the table in errors.
func queryIDRows(ctx context.Context, dbURL, what, query string, args ...any) ([]idRow, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (idRow, error) {
		var r idRow
		err := row.Scan(&r.id, &r.n, &r.amount, &r.at)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	return out, nil
}

// verify reads back the topic, the dead-letter topic and the ledger and checks
// the invariants.
func (r *Result) verify(ctx context.Context, brokers []string, dbURL string, partitions int, snapshots []offsetSnapshot, txns *txnLog) error {
	if err := r.readTopic(ctx, brokers, partitions, txns); err != nil {
		return err
	}
	dl, err := readDeadLetters(ctx, brokers, dlqTopic)
	if err != nil {
		return err
	}
	r.DLQ, r.DLQByReason = len(dl.all), dl.byReason()
	// Ids dead-lettered as outside the window, with the earliest such letter.
	outside := map[uuid.UUID]time.Time{}
	for _, d := range dl.all {
		if d.reason == outsideWindowReason && d.hasID {
			if prev, ok := outside[d.id]; !ok || d.at.Before(prev) {
				outside[d.id] = d.at
			}
		}
	}
	// Ids of the bug (see replay.go) dead-lettered as handler_failed: they
	// take effect in the replay phase.
	// A copy of such an id is done once any of its copies is dead-lettered.
	bugLettered := map[uuid.UUID]time.Time{}
	for _, d := range dl.all {
		if d.reason == string(consumer.ReasonHandlerFailed) && d.hasID && r.Bug.kind(d.id) != bugNone {
			if prev, ok := bugLettered[d.id]; !ok || d.at.Before(prev) {
				bugLettered[d.id] = d.at
			}
		}
	}
	appliedAt, err := r.readLedger(ctx, dbURL)
	if err != nil {
		return err
	}
	for id := range r.validIDs {
		_, applied := appliedAt[id]
		_, out := outside[id]
		switch {
		case applied:
		case out:
			r.OutsideWindow++
		case !bugLettered[id].IsZero():
			r.BugDeadLettered++
		case txns.unknown[id]:
			r.UncertainUnapplied++
		default:
			r.Lost++
		}
	}
	// Every dead letter names a data record that may be handled.
	for pos := range dl.first {
		switch m, ok := r.positions[pos]; {
		case !ok:
			r.ForeignDeadLetters++
		case m.aborted:
			r.AbortedApplied++
		}
	}
	// Malformed messages must be dead-lettered with their reason.
	r.MalformedMissing, r.MalformedWrong = dl.malformed(r.byPartition)

	r.Snapshots = len(snapshots)
	r.OffsetViolations = checkOffsets(r.byPartition, func(m message) (time.Time, bool) {
		if m.aborted {
			return time.Time{}, true // nothing to do
		}
		if m.valid {
			if at, ok := appliedAt[m.id]; ok {
				return at, true
			}
			if at, ok := outside[m.id]; ok {
				return at, true
			}
			if at, ok := bugLettered[m.id]; ok {
				return at, true
			}
			return time.Time{}, txns.unknown[m.id] // maybe aborted: nothing to do
		}
		d, ok := dl.first[m.pos()]
		return d.at, ok
	}, snapshots)
	return nil
}

// readTopic reads every partition of the topic back and classifies its
// messages. The read-back is at ReadUncommitted: it sees the records of
// aborted transactions too, and tells them by the producer's record.
func (r *Result) readTopic(ctx context.Context, brokers []string, partitions int, txns *txnLog) error {
	r.byPartition = make([][]message, partitions)
	r.validIDs, r.abortedIDs = map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	r.positions = map[position]message{}
	for p := range partitions {
		err := localstack.ReadPartition(ctx, brokers, topic, p, func(m kafka.Message) {
			id, reason := classify(m.Value)
			msg := message{partition: p, offset: m.Offset, id: id, valid: reason == "", reason: reason}
			if msg.valid && txns.aborted[id] {
				msg.valid, msg.aborted = false, true
				r.abortedIDs[id] = true
				r.AbortedMessages++
			}
			r.byPartition[p] = append(r.byPartition[p], msg)
			r.positions[msg.pos()] = msg
			r.Messages++
			switch {
			case msg.aborted:
			case msg.valid:
				if r.validIDs[id] {
					r.DuplicateMessages++
				}
				r.validIDs[id] = true
			default:
				r.MalformedMessages++
			}
		})
		if err != nil {
			return err
		}
	}
	r.Unique = len(r.validIDs)
	return nil
}

// readLedger counts the ledger's rows per id and returns when each valid
// id's first row became durable.
func (r *Result) readLedger(ctx context.Context, dbURL string) (map[uuid.UUID]time.Time, error) {
	rows, err := queryIDRows(ctx, dbURL, "the ledger", `SELECT event_id, count(*), sum(amount), min(pg_xact_commit_timestamp(xmin))
		FROM ledger GROUP BY event_id`)
	if err != nil {
		return nil, err
	}
	appliedAt := map[uuid.UUID]time.Time{}
	for _, row := range rows {
		switch {
		case r.abortedIDs[row.id]:
			r.AbortedApplied += int(row.n)
			continue
		case !r.validIDs[row.id]:
			r.UnknownApplied += int(row.n)
			continue
		}
		r.Applied++
		r.DuplicatesApplied += int(row.n - 1)
		if row.amount != row.n*amountOf(row.id) {
			r.WrongAmount++
		}
		if row.at != nil {
			appliedAt[row.id] = *row.at
		}
	}
	return appliedAt, nil
}

// checkOffsets checks that no committed offset ran ahead of durable handling:
// for every snapshot, every message below the committed offset of its
// partition was done (doneAt: its id's first ledger row committed, or the
// message dead-lettered) by the snapshot's instant. Messages are in offset
// order per partition.
func checkOffsets(byPartition [][]message, doneAt func(message) (time.Time, bool), snapshots []offsetSnapshot) []string {
	var out []string
	for p, msgs := range byPartition {
		doneBy := make([]time.Time, len(msgs)) // running max of completion times
		var running time.Time
		firstNever := int64(-1)
		for i, m := range msgs {
			at, ok := doneAt(m)
			if !ok && firstNever < 0 {
				firstNever = m.offset
			}
			if at.After(running) {
				running = at
			}
			doneBy[i] = running
		}
		for _, s := range snapshots {
			c, ok := s.offsets[p]
			if !ok || c <= 0 {
				continue
			}
			if firstNever >= 0 && c > firstNever {
				out = append(out, fmt.Sprintf("partition %d: offset %d committed past offset %d, which was never handled", p, c, firstNever))
				break
			}
			idx := sort.Search(len(msgs), func(i int) bool { return msgs[i].offset >= c }) - 1
			// 50ms of slack for the clocks of two processes reading one system clock.
			if idx >= 0 && doneBy[idx].After(s.at.Add(50*time.Millisecond)) {
				// Name the first late message, for the diagnosis.
				late := msgs[0]
				for _, m := range msgs[:idx+1] {
					if at, _ := doneAt(m); at.After(s.at.Add(50 * time.Millisecond)) {
						late = m
						break
					}
				}
				out = append(out, fmt.Sprintf("partition %d: offset %d committed by %s (asked at %s) before the events below it were durable (at %s; first late: offset %d, id %s)",
					p, c, s.at.Format(time.RFC3339Nano), s.asked.Format(time.RFC3339Nano), doneBy[idx].Format(time.RFC3339Nano), late.offset, late.id))
				break
			}
		}
	}
	return out
}
