package typescriptkafkajs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestTypeScriptConsumerRejectedCharge: the provider refuses one charge for
// good (422). docs/any-language.md: "Exceptions are for infrastructure
// failures that a retry can fix"; a verdict-like, per-record failure must not
// stall the partition. The consumer rolls the event's transaction back (no
// claim row, no ledger row, so a later replay is not skipped as a
// duplicate), dead-letters the record with reason charge_rejected, and goes
// on: the next record on the partition is charged and every offset is
// committed.
func TestTypeScriptConsumerRejectedCharge(t *testing.T) {
	node, npm := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := buildExample(ctx, node, npm, t.TempDir())
	if err != nil {
		t.Fatalf("building the example: %v", err)
	}
	dsn := consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer pool.Close()
	eng, err := dedup.NewEngine(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, "examples-typescript-kafkajs"); err != nil {
		t.Fatalf("creating the dedup table: %v", err)
	}
	if _, err := eng.Maintain(ctx, time.Now(), 2, 7*24*time.Hour); err != nil {
		t.Fatalf("creating partitions: %v", err)
	}
	if _, err := pool.Exec(ctx, ledgerDDL(t)); err != nil {
		t.Fatalf("creating the ledger: %v", err)
	}
	brk := startBroker(t)
	for _, tp := range []struct {
		name string
		n    int
	}{{topic, 1}, {dlqTopic, 1}} {
		if err := brk.createTopic(ctx, tp.name, tp.n); err != nil {
			t.Fatal(err)
		}
	}
	before, refused, after := newV7(time.Now()), newV7(time.Now()), newV7(time.Now())
	var recs []record
	for i, id := range []string{before, refused, after} {
		recs = append(recs, record{id: id, partition: 0, value: chargeBody(id, i)})
	}
	produce(t, ctx, brk, recs)

	prov := newProvider(t)
	prov.reject(refused)
	p := startProc(t, node, dir, "billing-reject", map[string]string{
		"KAFKA_BROKERS":            brk.addrs[0],
		"KAFKA_TOPIC":              topic,
		"KAFKA_GROUP_ID":           billing,
		"DEAD_LETTER_TOPIC":        dlqTopic,
		"DATABASE_URL":             dsn,
		"DEDUP_CLAIM_ONE_FUNCTION": table.ClaimOneFunction(),
		"CHARGE_URL":               prov.url(billing),
		"SESSION_TIMEOUT_MS":       "5000",
		"ATTEMPTS":                 "2",
	})
	waitFor(t, 90*time.Second, "the record after the refused charge to be charged and every offset committed", func() (bool, error) {
		if prov.snapshot(billing)[after] == 0 {
			return false, nil
		}
		l, err := brk.lag(ctx, billing, topic, 1)
		return err == nil && l == 0, err
	})
	p.stop(t)
	var rows int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger WHERE event_id = $1) + (SELECT count(*) FROM `+table.String()+` WHERE event_id = $1)`, refused).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("the refused event left %d ledger/dedup rows; want 0 (rolled back, so a replay is not skipped)", rows)
	}
	dl := readDeadLetters(t, ctx, brk)
	if got := dl[billing]["charge_rejected"]; len(got) != 1 || got[0] != refused {
		t.Errorf("dead letters %v; want one charge_rejected for %s", dl, refused)
	}
}

// ledgerDDL is the example's business table (sql/ledger.sql).
func ledgerDDL(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("sql/ledger.sql")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// chargeBody is a valid charge request event with id.
func chargeBody(id string, i int) []byte {
	b, _ := json.Marshal(map[string]any{
		"eventId": id, "type": "charge.requested", "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
		"account": fmt.Sprintf("acct-%d", i), "amountCents": 100 + i,
	})
	return b
}
