package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// outboxOrder is one business row of the outbox chain: the truth, since only
// a committed transaction leaves one.
type outboxOrder struct {
	key     string
	seq     int
	uid     uuid.UUID
	eventID uuid.UUID
}

// outboxPayload is the producer's event value (hack/chaos/outboxproducer).
type outboxPayload struct {
	Key string    `json:"key"`
	Seq int       `json:"seq"`
	UID uuid.UUID `json:"uid"`
}

// outboxRecord is one record of the outbox topic, read back.
type outboxRecord struct {
	partition int
	offset    int64
	key       string
	id        uuid.UUID // the eventId header
	ceID      string    // the ce_id header, which the consumer reads
	payload   outboxPayload
	bad       bool // no eventId header, or a value that is no payload
}

// outboxHistory is what the outbox check reads: the business rows, the
// topic (partitions in order, each in offset order), the uids the producers
// rolled back on purpose, and the consumer's applied rows per event id.
type outboxHistory struct {
	orders     []outboxOrder
	records    [][]outboxRecord
	rolledBack []uuid.UUID
	applied    map[uuid.UUID]int
}

// OutboxResult is what the outbox chain observed.
type OutboxResult struct {
	Producers, Relays, Consumers                    int
	ProducerKills, RelayKills, RelayOwnerKills      int
	ConsumerKills, PostgresRestarts, BrokerRestarts int
	LagZero                                         bool

	Committed  int // business rows: events of committed transactions
	RolledBack int // uids the producers rolled back on purpose (recorded after the rollback returned)
	Records    int // records in the topic
	// PublishedDistinct is the distinct event ids in the topic, Republished
	// the records beyond the first of each id (takeovers, failed publishes).
	PublishedDistinct, Republished int
	Unpublished                    int // committed events never published
	Unapplied                      int // committed events published but never applied
	Lost                           int // committed events never published or never applied
	// UncommittedPublished are published ids with no business row (a
	// rolled-back or killed transaction's); RolledBackPublished those of
	// them whose uid a producer rolled back on purpose, RolledBackCommitted
	// rolled-back uids that have a business row (the harness's sanity).
	UncommittedPublished, RolledBackPublished, RolledBackCommitted int
	// OrderViolations: per key, a first publication whose seq is below an
	// earlier first publication's (or a key in two partitions).
	OrderViolations []string
	// Mismatched records: the ce_id header is not the eventId, or the key or
	// payload is not the business row's; Bad records have no eventId or an
	// undecodable value.
	Mismatched, Bad int
	Applied         int // distinct ids the consumer applied
	AppliedTwice    int // applied rows beyond the first per id
	AppliedUnknown  int // applied ids with no business row
}

// checkOutbox counts the outbox chain's invariants from a history.
func checkOutbox(h outboxHistory, r *OutboxResult) {
	byID := make(map[uuid.UUID]outboxOrder, len(h.orders))
	for _, o := range h.orders {
		byID[o.eventID] = o
	}
	r.Committed = len(h.orders)
	committedUID := map[uuid.UUID]bool{}
	for _, o := range h.orders {
		committedUID[o.uid] = true
	}
	rolledBack := map[uuid.UUID]bool{}
	for _, u := range h.rolledBack {
		rolledBack[u] = true
		if committedUID[u] {
			r.RolledBackCommitted++
		}
	}
	r.RolledBack = len(rolledBack)

	published := map[uuid.UUID]bool{}
	keyPartition := map[string]int{}
	lastSeq := map[string]int{}
	lastID := map[string]uuid.UUID{}
	for _, part := range h.records {
		for _, m := range part {
			r.Records++
			if m.bad {
				r.Bad++
				continue
			}
			if published[m.id] {
				r.Republished++
				continue
			}
			published[m.id] = true
			o, committed := byID[m.id]
			if !committed {
				r.UncommittedPublished++
				if rolledBack[m.payload.UID] {
					r.RolledBackPublished++
				}
				continue
			}
			if m.ceID != m.id.String() || m.key != o.key || m.payload != (outboxPayload{Key: o.key, Seq: o.seq, UID: o.uid}) {
				r.Mismatched++
			}
			if p, ok := keyPartition[o.key]; ok && p != m.partition {
				r.OrderViolations = append(r.OrderViolations, fmt.Sprintf("key %s published in partitions %d and %d", o.key, p, m.partition))
			}
			keyPartition[o.key] = m.partition
			if last, ok := lastSeq[o.key]; ok && o.seq < last {
				r.OrderViolations = append(r.OrderViolations, fmt.Sprintf("key %s: seq %d (event %s, %d/%d) first published after seq %d (event %s)",
					o.key, o.seq, m.id, m.partition, m.offset, last, lastID[o.key]))
				continue
			}
			lastSeq[o.key], lastID[o.key] = o.seq, m.id
		}
	}
	r.PublishedDistinct = len(published)
	for _, o := range h.orders {
		n, applied := h.applied[o.eventID]
		switch {
		case !published[o.eventID]:
			r.Unpublished++
		case !applied || n == 0:
			r.Unapplied++
		}
	}
	r.Lost = r.Unpublished + r.Unapplied
	for id, n := range h.applied {
		r.Applied++
		r.AppliedTwice += n - 1
		if _, ok := byID[id]; !ok {
			r.AppliedUnknown++
		}
	}
}

// Violations lists the outbox chain's broken invariants.
func (r *OutboxResult) Violations() []string {
	v := broken(
		invariant{!r.LagZero, "the outbox consumers' lag did not reach zero"},
		invariant{r.Committed == 0 || r.PublishedDistinct == 0, fmt.Sprintf("%d committed, %d published: nothing to check", r.Committed, r.PublishedDistinct)},
		invariant{r.Lost != 0, fmt.Sprintf("%d committed events lost (%d never published, %d published but never applied)", r.Lost, r.Unpublished, r.Unapplied)},
		invariant{r.UncommittedPublished != 0, fmt.Sprintf("%d events of transactions that did not commit published (%d of them rolled back on purpose)", r.UncommittedPublished, r.RolledBackPublished)},
		invariant{r.RolledBackCommitted != 0, fmt.Sprintf("%d rolled-back orders have a business row", r.RolledBackCommitted)},
		invariant{len(r.OrderViolations) != 0, fmt.Sprintf("%d order violations: %s", len(r.OrderViolations), strings.Join(first(r.OrderViolations, 5), "; "))},
		invariant{r.Mismatched != 0, fmt.Sprintf("%d records whose ce_id, key or payload is not their business row's", r.Mismatched)},
		invariant{r.Bad != 0, fmt.Sprintf("%d records without an eventId header or a readable payload", r.Bad)},
		invariant{r.AppliedTwice != 0, fmt.Sprintf("%d events applied twice", r.AppliedTwice)},
		invariant{r.AppliedUnknown != 0, fmt.Sprintf("%d applied events have no business row", r.AppliedUnknown)},
	)
	for i := range v {
		v[i] = "outbox chain: " + v[i]
	}
	return v
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// Print writes the findings and the RESULT line.
func (r *OutboxResult) Print(w io.Writer) {
	fmt.Fprintf(w, "chaos: outbox chain: %d producers (%d kill -9s), %d relays (%d kill -9s, %d of the owner), %d consumers (%d kill -9s), %d PostgreSQL and %d broker restarts\n",
		r.Producers, r.ProducerKills, r.Relays, r.RelayKills, r.RelayOwnerKills, r.Consumers, r.ConsumerKills, r.PostgresRestarts, r.BrokerRestarts)
	fmt.Fprintf(w, "chaos: outbox chain: %d events committed, %d orders rolled back on purpose; topic holds %d records: %d distinct ids, %d republished; %d never published, %d never applied; %d applied (%d twice)\n",
		r.Committed, r.RolledBack, r.Records, r.PublishedDistinct, r.Republished, r.Unpublished, r.Unapplied, r.Applied, r.AppliedTwice)
	fmt.Fprintf(w, "RESULT outbox_chaos committed=%d published_distinct=%d lost=%d order_violations=%d uncommitted_published=%d applied_twice=%d rolled_back=%d republished=%d mismatched=%d producer_kills=%d relay_kills=%d consumer_kills=%d pg_restarts=%d broker_restarts=%d\n",
		r.Committed, r.PublishedDistinct, r.Lost, len(r.OrderViolations), r.UncommittedPublished, r.AppliedTwice,
		r.RolledBack, r.Republished, r.Mismatched+r.Bad, r.ProducerKills, r.RelayKills, r.ConsumerKills, r.PostgresRestarts, r.BrokerRestarts)
}

// readOutboxHistory reads the business rows, the applied rows, the rollback
// file and the topic (read_committed, from the start).
func readOutboxHistory(ctx context.Context, dbURL string, brokers []string, partitions int, rollbackFile string) (outboxHistory, error) {
	h := outboxHistory{applied: map[uuid.UUID]int{}}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return h, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT key, seq, uid, event_id FROM `+outboxOrdersTable)
	if err != nil {
		return h, fmt.Errorf("reading the orders: %w", err)
	}
	if h.orders, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxOrder, error) {
		var o outboxOrder
		err := row.Scan(&o.key, &o.seq, &o.uid, &o.eventID)
		return o, err
	}); err != nil {
		return h, fmt.Errorf("reading the orders: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT event_id, count(*) FROM `+outboxAppliedTable+` GROUP BY event_id`)
	if err != nil {
		return h, fmt.Errorf("reading the applied events: %w", err)
	}
	var id uuid.UUID
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { h.applied[id] = n; return nil }); err != nil {
		return h, fmt.Errorf("reading the applied events: %w", err)
	}
	if f, err := os.Open(rollbackFile); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if u, err := uuid.Parse(strings.TrimSpace(sc.Text())); err == nil {
				h.rolledBack = append(h.rolledBack, u)
			}
		}
		f.Close()
	} else if !os.IsNotExist(err) {
		return h, err
	}
	h.records = make([][]outboxRecord, partitions)
	for p := range partitions {
		err := readCommitted(ctx, brokers, outboxTopic, p, func(m kafka.Message) {
			rec := outboxRecord{partition: p, offset: m.Offset, key: string(m.Key)}
			var hasID bool
			for _, x := range m.Headers {
				switch x.Key {
				case "eventId":
					id, perr := uuid.Parse(string(x.Value))
					rec.id, hasID = id, perr == nil
				case "ce_id":
					rec.ceID = string(x.Value)
				}
			}
			rec.bad = !hasID || json.Unmarshal(m.Value, &rec.payload) != nil
			h.records[p] = append(h.records[p], rec)
		})
		if err != nil {
			return h, err
		}
	}
	return h, nil
}

// readCommitted reads one partition from its start to its last stable
// offset at read_committed, calling fn for each record.
func readCommitted(ctx context.Context, brokers []string, topic string, partition int, fn func(kafka.Message)) error {
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, partition)
	if err != nil {
		return fmt.Errorf("reading %s/%d: %w", topic, partition, err)
	}
	last, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil {
		return fmt.Errorf("reading %s/%d end offset: %w", topic, partition, err)
	}
	if last == 0 {
		return nil
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partition, MaxWait: 100 * time.Millisecond,
		MaxBytes: 10 << 20, IsolationLevel: kafka.ReadCommitted})
	defer rd.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		m, err := rd.ReadMessage(rctx)
		if err != nil {
			return fmt.Errorf("reading %s/%d: %w", topic, partition, err)
		}
		fn(m)
		if m.Offset+1 >= last {
			return nil
		}
	}
}
