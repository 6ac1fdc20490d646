package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// ledgerStatement is the SQL sink's statement: $1 is the event id, $2 the
// payload (see docs/consumer.md).
const ledgerStatement = `INSERT INTO ledger (event_id, amount) VALUES ($1, ($2::jsonb->'payload'->>'amount')::bigint)`

// Result is what a run observed; Violations says what broke.
type Result struct {
	Seed              uint64
	Produced          int // messages the producer wrote (retried batches counted once)
	ProduceRetries    int
	Kills             int
	KillsAfterCommit  int
	PostgresRestarts  int
	BrokerRestarts    int
	MaintenanceRuns   int64
	MaintenanceErrors int64
	LagZero           bool

	Messages          int // messages in the topic (a retried batch may have landed twice)
	Unique            int // distinct valid ids in the topic
	DuplicateMessages int // valid messages repeating an earlier id
	MalformedMessages int
	Applied           int // distinct ids with a ledger row
	DuplicatesApplied int // ledger rows beyond the first per id
	Lost              int // valid ids neither applied nor dead-lettered as outside the window
	OutsideWindow     int // valid ids dead-lettered as outside the window
	UnknownApplied    int // ledger rows for ids never produced validly
	WrongAmount       int
	DLQ               int
	DLQByReason       map[string]int
	MalformedMissing  int // malformed messages absent from the dead-letter topic
	MalformedWrong    int // ... or present with another reason
	OffsetViolations  []string
	Snapshots         int
	PartitionProblems []string
	LogsChecked       int      // consumer and broker log files scanned for the database password
	SecretLeaks       []string // log files that contained it

	TxnCommitted, TxnAborted, TxnUnknown int // transactions of the transactional producer, by outcome
	AbortedMessages                      int // records of aborted transactions in the topic
	// AbortedApplied counts what the runtime did with records of aborted
	// transactions: ledger rows for their ids and dead letters of them.
	AbortedApplied int
	// UncertainUnapplied counts ids of transactions with an unknown outcome
	// that were not applied: they may have been aborted.
	UncertainUnapplied int
	// ForeignDeadLetters are dead letters for offsets that hold no data
	// record: a transaction marker handed out as a message would be one.
	ForeignDeadLetters int

	// The HTTP group (external handler) and its provider.
	HTTPConsumers    int
	HTTPKills        int
	ProviderRequests int // requests the provider answered or dropped
	ProviderDrops    int // requests applied and then dropped without an answer
	ProviderNoKey    int // requests without an Idempotency-Key
	ProviderIDs      int // distinct keys the provider saw
	// ProviderMissing counts valid ids that never reached the provider,
	// leaving out ids the HTTP group dead-lettered and ids of transactions
	// with an unknown outcome.
	ProviderMissing          int
	ProviderRequestsPerIDMax int
	ProviderRepeated         int // ids the provider saw more than once
	ProviderAborted          int // ids of aborted transactions the provider saw or the HTTP group recorded
	ProviderUnknown          int // keys the provider saw that are no valid id in the topic
	HTTPDLQ                  int
	HTTPDLQByReason          map[string]int
	HTTPRecorded             int // distinct ids with a dedup row of the HTTP group
	HTTPDedupRowsPerIDMax    int
	HTTPRecordedNotCalled    int // dedup rows for ids the provider never saw
	HTTPUnrecorded           int // valid ids neither recorded nor dead-lettered by the HTTP group
	HTTPMalformedMissing     int // malformed messages absent from the HTTP group's dead-letter topic
	HTTPSnapshots            int
	HTTPOffsetViolations     []string // the HTTP group's offsets committed ahead of its dedup rows or dead letters
	// HTTPOffsetAheadOfOwner is the strict check: it also counts offsets
	// committed past a cross-partition duplicate before the dedup row of its
	// id committed (reported, not failed: see verifyHTTP).
	HTTPOffsetAheadOfOwner []string

	// The longest transaction a consumer held open, from pg_stat_activity
	// samples every 20 ms: overall, of the SQL and of the HTTP fleet.
	TxSampled                              bool
	MaxTxOpen, MaxTxOpenSQL, MaxTxOpenHTTP time.Duration

	// Kept from verify for verifyHTTP.
	validIDs, abortedIDs map[uuid.UUID]bool
	positions            map[[2]int64]message
	byPartition          [][]message
}

// Violations lists every broken invariant.
func (r *Result) Violations() []string {
	var v []string
	if !r.LagZero {
		v = append(v, "consumer lag did not reach zero")
	}
	if r.Messages == 0 || r.Unique == 0 {
		v = append(v, "nothing was produced or read back")
	}
	if r.DuplicatesApplied != 0 {
		v = append(v, fmt.Sprintf("%d duplicate applications", r.DuplicatesApplied))
	}
	if r.Lost != 0 {
		v = append(v, fmt.Sprintf("%d valid ids lost", r.Lost))
	}
	if r.OutsideWindow != 0 {
		v = append(v, fmt.Sprintf("%d valid ids fell outside the dedup window (retention too short for this run)", r.OutsideWindow))
	}
	if r.AbortedApplied != 0 {
		v = append(v, fmt.Sprintf("%d records of aborted transactions applied or dead-lettered", r.AbortedApplied))
	}
	if r.ForeignDeadLetters != 0 {
		v = append(v, fmt.Sprintf("%d dead letters for offsets that hold no data record (transaction markers?)", r.ForeignDeadLetters))
	}
	if r.UnknownApplied != 0 {
		v = append(v, fmt.Sprintf("%d ledger rows for ids never produced", r.UnknownApplied))
	}
	if r.WrongAmount != 0 {
		v = append(v, fmt.Sprintf("%d ledger rows with a wrong amount", r.WrongAmount))
	}
	if r.MalformedMissing != 0 || r.MalformedWrong != 0 {
		v = append(v, fmt.Sprintf("malformed messages: %d missing from the dead-letter topic, %d with the wrong reason", r.MalformedMissing, r.MalformedWrong))
	}
	if r.Applied+r.Lost+r.OutsideWindow+r.UncertainUnapplied != r.Unique {
		v = append(v, fmt.Sprintf("accounting: applied %d + lost %d + outside %d + uncertain %d != unique %d",
			r.Applied, r.Lost, r.OutsideWindow, r.UncertainUnapplied, r.Unique))
	}
	if r.Snapshots == 0 {
		v = append(v, "no committed-offset snapshot was taken")
	}
	if r.LogsChecked == 0 {
		v = append(v, "no log file was checked for secrets")
	}
	if len(r.SecretLeaks) > 0 {
		v = append(v, "the database password appears in logs: "+strings.Join(r.SecretLeaks, ", "))
	}
	if !r.TxSampled {
		v = append(v, "no pg_stat_activity sample was taken: max_tx_open_ms unknown")
	}
	if r.HTTPConsumers > 0 {
		v = append(v, r.httpViolations()...)
	}
	v = append(v, r.OffsetViolations...)
	v = append(v, r.PartitionProblems...)
	return v
}

// Print writes the findings and the RESULT line.
func (r *Result) Print(w io.Writer) {
	fmt.Fprintf(w, "chaos: seed %d\n", r.Seed)
	fmt.Fprintf(w, "chaos: produced %d messages (%d write retries); topic holds %d: %d unique valid ids, %d duplicates, %d malformed\n",
		r.Produced, r.ProduceRetries, r.Messages, r.Unique, r.DuplicateMessages, r.MalformedMessages)
	fmt.Fprintf(w, "chaos: chaos done: %d kill -9s (%d right after a database commit), %d PostgreSQL restarts, %d broker restarts; %d maintenance runs (%d failed, retried)\n",
		r.Kills, r.KillsAfterCommit, r.PostgresRestarts, r.BrokerRestarts, r.MaintenanceRuns, r.MaintenanceErrors)
	var reasons []string
	for k, n := range r.DLQByReason {
		reasons = append(reasons, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(reasons)
	fmt.Fprintf(w, "chaos: dead-lettered %d (%s); %d committed-offset snapshots checked; %d log files checked for the database password, %d leaked it\n",
		r.DLQ, strings.Join(reasons, " "), r.Snapshots, r.LogsChecked, len(r.SecretLeaks))
	fmt.Fprintf(w, "chaos: transactional producer: %d transactions committed, %d aborted, %d with an unknown outcome (%d of their ids not applied); %d records of aborted transactions in the topic\n",
		r.TxnCommitted, r.TxnAborted, r.TxnUnknown, r.UncertainUnapplied, r.AbortedMessages)
	fmt.Fprintf(w, "chaos: longest consumer transaction open: %d ms (SQL sink %d ms, HTTP sink %d ms)\n",
		r.MaxTxOpen.Milliseconds(), r.MaxTxOpenSQL.Milliseconds(), r.MaxTxOpenHTTP.Milliseconds())
	var httpPart string
	if r.HTTPConsumers > 0 {
		reasons = reasons[:0]
		for k, n := range r.HTTPDLQByReason {
			reasons = append(reasons, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(reasons)
		fmt.Fprintf(w, "chaos: HTTP group: %d kill -9s; provider got %d requests (%d applied then dropped, %d without a key) for %d ids, %d of them more than once; %d ids recorded; dead-lettered %d (%s); %d recorded but never called, %d neither recorded nor dead-lettered, %d aborted, %d unknown\n",
			r.HTTPKills, r.ProviderRequests, r.ProviderDrops, r.ProviderNoKey, r.ProviderIDs, r.ProviderRepeated, r.HTTPRecorded,
			r.HTTPDLQ, strings.Join(reasons, " "), r.HTTPRecordedNotCalled, r.HTTPUnrecorded, r.ProviderAborted, r.ProviderUnknown)
		fmt.Fprintf(w, "chaos: HTTP group: %d committed-offset snapshots checked against its dedup rows and dead letters; %d malformed messages missing from its dead-letter topic\n",
			r.HTTPSnapshots, r.HTTPMalformedMissing)
		for _, s := range r.HTTPOffsetAheadOfOwner {
			fmt.Fprintf(w, "chaos: HTTP group (strict, reported): %s\n", s)
		}
		httpPart = fmt.Sprintf(" http_kills=%d provider_missing=%d provider_requests_per_id_max=%d http_dedup_rows_per_id_max=%d http_offset_violations=%d http_offset_ahead_of_owner_record=%d",
			r.HTTPKills, r.ProviderMissing, r.ProviderRequestsPerIDMax, r.HTTPDedupRowsPerIDMax, len(r.HTTPOffsetViolations), len(r.HTTPOffsetAheadOfOwner))
	}
	fmt.Fprintf(w, "RESULT events=%d unique=%d applied=%d duplicates_applied=%d lost=%d aborted=%d aborted_applied=%d kills=%d dlq=%d pg_restarts=%d broker_restarts=%d offset_violations=%d%s max_tx_open_ms=%d seed=%d\n",
		r.Messages, r.Unique, r.Applied, r.DuplicatesApplied, r.Lost, r.AbortedMessages, r.AbortedApplied, r.Kills, r.DLQ, r.PostgresRestarts, r.BrokerRestarts, len(r.OffsetViolations),
		httpPart, r.MaxTxOpen.Milliseconds(), r.Seed)
}

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

type dlqRecord struct {
	reason string
	at     time.Time
}

// verify reads back the topic, the dead-letter topic and the ledger and checks
// the invariants.
func (r *Result) verify(ctx context.Context, brokers []string, dbURL string, partitions int, snapshots []offsetSnapshot, txns *txnLog) error {
	r.DLQByReason = map[string]int{}
	byPartition := make([][]message, partitions)
	valid := map[uuid.UUID]bool{}
	aborted := map[uuid.UUID]bool{}
	// The read-back is at ReadUncommitted: it sees the records of aborted
	// transactions too, and tells them by the producer's record.
	for p := range partitions {
		err := readAll(ctx, brokers, topic, p, func(m kafka.Message) {
			id, reason := classify(m.Value)
			msg := message{partition: p, offset: m.Offset, id: id, valid: reason == "", reason: reason}
			if msg.valid && txns.aborted[id] {
				msg.valid, msg.aborted = false, true
				aborted[id] = true
				r.AbortedMessages++
			}
			byPartition[p] = append(byPartition[p], msg)
			r.Messages++
			if msg.aborted {
				return
			}
			if msg.valid {
				if valid[id] {
					r.DuplicateMessages++
				}
				valid[id] = true
			} else {
				r.MalformedMessages++
			}
		})
		if err != nil {
			return err
		}
	}
	r.Unique = len(valid)
	r.validIDs, r.abortedIDs = valid, aborted

	// Dead letters by original position.
	dlq := map[[2]int64]dlqRecord{}
	outside := map[uuid.UUID]time.Time{}
	err := readAll(ctx, brokers, dlqTopic, 0, func(m kafka.Message) {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		r.DLQ++
		reason := h[consumer.HeaderDLQReason]
		r.DLQByReason[reason]++
		p, _ := strconv.ParseInt(h[consumer.HeaderDLQOriginalPartition], 10, 64)
		o, _ := strconv.ParseInt(h[consumer.HeaderDLQOriginalOffset], 10, 64)
		at := m.Time
		if t, err := time.Parse(time.RFC3339Nano, h[consumer.HeaderDLQTime]); err == nil {
			at = t
		}
		key := [2]int64{p, o}
		if prev, ok := dlq[key]; !ok || at.Before(prev.at) {
			dlq[key] = dlqRecord{reason: reason, at: at}
		}
		if reason == "outside_window" {
			if id, err := uuid.Parse(h[consumer.HeaderDLQEventID]); err == nil {
				if prev, ok := outside[id]; !ok || at.Before(prev) {
					outside[id] = at
				}
			}
		}
	})
	if err != nil {
		return err
	}

	// The ledger, with when each id's first row became durable.
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT event_id, count(*), sum(amount), min(pg_xact_commit_timestamp(xmin))
		FROM ledger GROUP BY event_id`)
	if err != nil {
		return fmt.Errorf("reading the ledger: %w", err)
	}
	appliedAt := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var id uuid.UUID
		var n, amount int64
		var at *time.Time
		if err := rows.Scan(&id, &n, &amount, &at); err != nil {
			return err
		}
		if aborted[id] {
			r.AbortedApplied += int(n)
			continue
		}
		if !valid[id] {
			r.UnknownApplied += int(n)
			continue
		}
		r.Applied++
		r.DuplicatesApplied += int(n - 1)
		if amount != n*amountOf(id) {
			r.WrongAmount++
		}
		if at != nil {
			appliedAt[id] = *at
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for id := range valid {
		if _, ok := appliedAt[id]; ok {
			continue
		}
		if _, ok := outside[id]; ok {
			r.OutsideWindow++
			continue
		}
		if txns.unknown[id] {
			r.UncertainUnapplied++
			continue
		}
		r.Lost++
	}

	// Every dead letter names a data record that may be handled.
	at := map[[2]int64]message{}
	for _, msgs := range byPartition {
		for _, m := range msgs {
			at[[2]int64{int64(m.partition), m.offset}] = m
		}
	}
	r.positions, r.byPartition = at, byPartition
	for pos := range dlq {
		switch m, ok := at[pos]; {
		case !ok:
			r.ForeignDeadLetters++
		case m.aborted:
			r.AbortedApplied++
		}
	}

	// Malformed messages must be dead-lettered with their reason.
	for _, msgs := range byPartition {
		for _, m := range msgs {
			if m.valid || m.aborted {
				continue
			}
			d, ok := dlq[[2]int64{int64(m.partition), m.offset}]
			switch {
			case !ok:
				r.MalformedMissing++
			case d.reason != m.reason:
				r.MalformedWrong++
			}
		}
	}

	r.Snapshots = len(snapshots)
	r.OffsetViolations = checkOffsets(byPartition, func(m message) (time.Time, bool) {
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
			return time.Time{}, txns.unknown[m.id] // maybe aborted: nothing to do
		}
		d, ok := dlq[[2]int64{int64(m.partition), m.offset}]
		return d.at, ok
	}, snapshots)
	return nil
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

// readAll reads one partition from the start to its current end.
func readAll(ctx context.Context, brokers []string, t string, partition int, fn func(kafka.Message)) error {
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], t, partition)
	if err != nil {
		return fmt.Errorf("reading %s/%d: %w", t, partition, err)
	}
	last, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil {
		return fmt.Errorf("reading %s/%d end offset: %w", t, partition, err)
	}
	if last == 0 {
		return nil
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: t, Partition: partition, MaxWait: 100 * time.Millisecond, MaxBytes: 10 << 20})
	defer rd.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		m, err := rd.ReadMessage(rctx)
		if err != nil {
			return fmt.Errorf("reading %s/%d: %w", t, partition, err)
		}
		fn(m)
		if m.Offset+1 >= last {
			return nil
		}
	}
}

func execSQL(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("running SQL: %w", err)
	}
	return nil
}
