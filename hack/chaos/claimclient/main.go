// Command claimclient is the chaos run's "other language" client: a Kafka
// consumer that does not use the Go runtime but deduplicates through the
// dedup table's claim function, as docs/any-language.md tells a TypeScript,
// Java or Python service to. It is written with a plain Kafka client
// (kafka-go's consumer group reader, offsets committed by hand) and a plain
// PostgreSQL driver (pgx in QueryExecModeExec: no named prepared statement,
// so it works through PgBouncer in transaction mode as well as directly).
//
// For each batch of records it fetched: decode the envelopes; in one
// transaction claim the batch's ids with one <table>_claim(ids, group) call
// and insert the ledger rows of the ids whose verdict is `new`; commit; then
// commit the batch's offsets. Records without a canonical eventId, and the
// verdicts outside_window and not_v7, are skipped with a log line (the
// policy "skip" of the doc: the chaos run dead-letters them in its other
// groups).
//
// The environment:
//
//	CLAIM_BROKERS           comma-separated broker addresses
//	CLAIM_TOPIC, CLAIM_GROUP
//	CLAIM_DATABASE_URL      PostgreSQL or a transaction-mode PgBouncer
//	DEDUP_CLAIM_FUNCTION    the batch claim function (the app Secret's claimFunction)
//	CLAIM_LEDGER_TABLE      the table of the effects (event_id uuid, amount bigint)
//	CLAIM_STALL_FILE        optional, for the chaos harness: after a database
//	                        commit, a client that can rename this file to
//	                        FILE.<pid> waits 10s before it commits the offsets,
//	                        so the harness can kill -9 it in that window
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
)

type config struct {
	brokers                  []string
	topic, group             string
	dbURL, claimFn, ledger   string
	stallFile                string
	batchSize                int
	batchWait                time.Duration
	session, heartbeat, rbal time.Duration
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	c := config{
		brokers:   strings.Split(os.Getenv("CLAIM_BROKERS"), ","),
		topic:     os.Getenv("CLAIM_TOPIC"),
		group:     os.Getenv("CLAIM_GROUP"),
		dbURL:     os.Getenv("CLAIM_DATABASE_URL"),
		claimFn:   os.Getenv("DEDUP_CLAIM_FUNCTION"),
		ledger:    os.Getenv("CLAIM_LEDGER_TABLE"),
		stallFile: os.Getenv("CLAIM_STALL_FILE"),
		batchSize: 200,
		batchWait: 20 * time.Millisecond,
		session:   2 * time.Second,
		heartbeat: 200 * time.Millisecond,
		rbal:      4 * time.Second,
	}
	if c.topic == "" || c.group == "" || c.dbURL == "" || c.claimFn == "" || c.ledger == "" {
		log.Fatal("claimclient: CLAIM_BROKERS, CLAIM_TOPIC, CLAIM_GROUP, CLAIM_DATABASE_URL, DEDUP_CLAIM_FUNCTION and CLAIM_LEDGER_TABLE are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil && ctx.Err() == nil {
		log.Fatalf("claimclient: %v", err)
	}
	log.Print("claimclient: stopped")
}

func run(ctx context.Context, c config) error {
	pc, err := pgxpool.ParseConfig(c.dbURL)
	if err != nil {
		return fmt.Errorf("parsing the database URL: %w", err)
	}
	// Through a transaction pooler every statement must be self-contained:
	// pgx's default (QueryExecModeCacheStatement) prepares named statements,
	// which the next transaction's server connection does not have. Exec
	// sends each statement unnamed, in one round trip, its parameter types
	// taken from the Go values (hence the ::uuid[] casts in the SQL).
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pc.ConnConfig.RuntimeParams["application_name"] = c.group
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("opening the database pool: %w", err)
	}
	defer pool.Close()

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           c.brokers,
		Topic:             c.topic,
		GroupID:           c.group,
		IsolationLevel:    kafka.ReadCommitted, // never see a record of an aborted transaction
		CommitInterval:    0,                   // CommitMessages commits synchronously
		StartOffset:       kafka.FirstOffset,
		SessionTimeout:    c.session,
		HeartbeatInterval: c.heartbeat,
		RebalanceTimeout:  c.rbal,
		JoinGroupBackoff:  200 * time.Millisecond,
		MaxWait:           100 * time.Millisecond,
		ReadBackoffMax:    500 * time.Millisecond,
		ErrorLogger:       kafka.LoggerFunc(func(f string, a ...any) { log.Printf("kafka: "+f, a...) }),
	})
	defer r.Close()
	log.Printf("claimclient: consuming %s as group %s, claiming with %s", c.topic, c.group, c.claimFn)

	var applied, duplicates, skipped int
	for ctx.Err() == nil {
		batch, err := fetchBatch(ctx, r, c.batchSize, c.batchWait)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The reader reports a failure (the broker restarting, the group
			// coordinator moving) and carries on: so does the client.
			log.Printf("claimclient: fetching: %v", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		res := apply(ctx, pool, c, batch)
		applied, duplicates, skipped = applied+res.new, duplicates+res.duplicate, skipped+res.skipped
		if ctx.Err() != nil {
			return nil
		}
		if c.stallFile != "" {
			stall(ctx, c.stallFile)
		}
		commitOffsets(ctx, r, batch)
		log.Printf("claimclient: batch of %d: %d new, %d duplicate, %d skipped (totals %d, %d, %d)",
			len(batch), res.new, res.duplicate, res.skipped, applied, duplicates, skipped)
	}
	return nil
}

// fetchBatch blocks for one record, then takes what arrives within wait, up
// to n records.
func fetchBatch(ctx context.Context, r *kafka.Reader, n int, wait time.Duration) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	batch := []kafka.Message{m}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for len(batch) < n {
		m, err := r.FetchMessage(wctx)
		if err != nil {
			break // the wait is over (a fetch cut short takes no record)
		}
		batch = append(batch, m)
	}
	return batch, nil
}

type entry struct {
	id     string
	amount int64
}

// decode reads the envelope as the Go runtime does: a JSON object whose
// eventId is a string of 36 characters (canonical UUID text); the database
// checks the rest (not_v7).
func decode(value []byte) (entry, bool) {
	var ev struct {
		EventID any `json:"eventId"`
		Payload struct {
			Amount int64 `json:"amount"`
		} `json:"payload"`
	}
	if json.Unmarshal(value, &ev) != nil {
		return entry{}, false
	}
	s, ok := ev.EventID.(string)
	if !ok || len(s) != 36 || !canonical(s) {
		return entry{}, false
	}
	return entry{id: strings.ToLower(s), amount: ev.Payload.Amount}, true
}

// canonical reports whether s is 8-4-4-4-12 hex digits.
func canonical(s string) bool {
	for i, ch := range s {
		switch i {
		case 8, 13, 18, 23:
			if ch != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", ch) {
				return false
			}
		}
	}
	return true
}

type outcome struct{ new, duplicate, skipped int }

// apply runs the batch's transaction until it commits: a failure (PostgreSQL
// restarting, the pooler's server connection lost) rolls everything back,
// claims included, and the same batch is tried again.
func apply(ctx context.Context, pool *pgxpool.Pool, c config, batch []kafka.Message) outcome {
	var entries []entry
	skipped := 0
	for _, m := range batch {
		if e, ok := decode(m.Value); ok {
			entries = append(entries, e)
		} else {
			skipped++
			log.Printf("claimclient: skipping %d/%d: no canonical eventId", m.Partition, m.Offset)
		}
	}
	if len(entries) == 0 {
		return outcome{skipped: skipped}
	}
	backoff := 50 * time.Millisecond
	for {
		o, err := claimAndApply(ctx, pool, c, entries)
		if err == nil {
			o.skipped += skipped
			return o
		}
		if ctx.Err() != nil {
			return outcome{}
		}
		log.Printf("claimclient: transaction failed, retrying the batch in %s: %v", backoff, err)
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// claimAndApply is one transaction: the claim of every id in one call, the
// ledger rows of the new ones in one statement, commit.
func claimAndApply(ctx context.Context, pool *pgxpool.Pool, c config, entries []entry) (outcome, error) {
	var o outcome
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	tx, err := pool.Begin(tctx)
	if err != nil {
		return o, fmt.Errorf("beginning: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.id
	}
	rows, err := tx.Query(tctx, `SELECT c.verdict FROM `+c.claimFn+`($1::uuid[], $2::text) WITH ORDINALITY AS c(event_id, verdict, n) ORDER BY c.n`, ids, c.group)
	if err != nil {
		return o, fmt.Errorf("claiming: %w", err)
	}
	verdicts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return o, fmt.Errorf("claiming: %w", err)
	}
	if len(verdicts) != len(entries) {
		return o, fmt.Errorf("claiming %d ids: %d verdicts", len(entries), len(verdicts))
	}
	var newIDs []string
	var amounts []int64
	for i, v := range verdicts {
		switch v {
		case "new":
			newIDs, amounts = append(newIDs, entries[i].id), append(amounts, entries[i].amount)
			o.new++
		case "duplicate":
			o.duplicate++
		default: // outside_window, not_v7: the policy is to skip
			o.skipped++
			log.Printf("claimclient: skipping %s: %s", entries[i].id, v)
		}
	}
	if len(newIDs) > 0 {
		if _, err := tx.Exec(tctx, `INSERT INTO `+c.ledger+` (event_id, amount) SELECT * FROM unnest($1::uuid[], $2::bigint[])`, newIDs, amounts); err != nil {
			return o, fmt.Errorf("inserting the ledger rows: %w", err)
		}
	}
	if err := tx.Commit(tctx); err != nil {
		return o, fmt.Errorf("committing: %w", err)
	}
	return o, nil
}

// commitOffsets commits the batch's offsets after its transaction. A commit
// that keeps failing is given up: the records are delivered again (to this
// client or, after a rebalance, another) and their claims say duplicate.
func commitOffsets(ctx context.Context, r *kafka.Reader, batch []kafka.Message) {
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.CommitMessages(cctx, batch...)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		if attempt == 5 || errors.Is(err, kafka.RebalanceInProgress) || errors.Is(err, kafka.IllegalGeneration) {
			log.Printf("claimclient: giving up committing offsets (the records come again): %v", err)
			return
		}
		log.Printf("claimclient: committing offsets, attempt %d: %v", attempt, err)
		time.Sleep(200 * time.Millisecond)
	}
}

// stall is the harness's hook: the client that renames the file first waits
// between its database commit and its offset commit, to be killed there.
func stall(ctx context.Context, file string) {
	if os.Rename(file, file+"."+strconv.Itoa(os.Getpid())) != nil {
		return
	}
	log.Print("claimclient: committed to the database; stalling before the offset commit (CLAIM_STALL_FILE)")
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
	}
}
