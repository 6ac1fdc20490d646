package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/outbox"
)

// TestOutbox_HandlerEmitsInItsDedupTransaction: a handler applies an order
// and emits an invoice with outbox.Emit in its dedup transaction. Every
// order is delivered twice and some fail for good: each applied order
// yields exactly one outbox row and one published invoice (keyed by the
// order, carrying the invoice's own eventId); a duplicate, skipped by the
// dedup, emits nothing, and a failed order's emit is rolled back with it.
func TestOutbox_HandlerEmitsInItsDedupTransaction(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.kafka.MustCreateTopic(t, "invoices", 2)
	tbl := outbox.Table{Name: "outbox"}
	if err := outbox.Ensure(ctx, e.pool, tbl, "chain-test"); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Maintain(ctx, e.pool, tbl, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		if err := e.handler(ctx, tx, ev); err != nil {
			return err
		}
		if _, err := outbox.Emit(ctx, tx, tbl, outbox.Message{Topic: "invoices", Key: []byte(ev.ID.String()),
			Payload: []byte(`{"invoiceFor":"` + ev.ID.String() + `"}`), Headers: map[string]string{"type": "InvoiceRequested"}}); err != nil {
			return err
		}
		if strings.Contains(string(ev.Payload), `"fail":true`) {
			return consumer.Permanent(errors.New("this order cannot be invoiced"))
		}
		return nil
	}
	cfg, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(outbox.Config{Table: tbl, ConnConfig: cfg, Brokers: e.kafka.Brokers(),
		PollInterval: 100 * time.Millisecond, PublishTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()
	defer func() {
		rcancel()
		if err := <-relayDone; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	e.start(e.config(), handler)

	const orders, failing = 20, 3
	var msgs []kafka.Message
	ok := map[string]bool{}
	for i := range orders + failing {
		id := newID(t)
		extra := ""
		if i >= orders {
			extra = `,"fail":true`
		} else {
			ok[id.String()] = true
		}
		msgs = append(msgs, event(id, 0, extra), event(id, 0, extra)) // each order twice
	}
	e.kafka.Produce(t, e.topic, msgs...)
	e.waitCaughtUp(t, time.Minute)

	var rows int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != orders {
		t.Errorf("%d outbox rows, want %d (one per applied order)", rows, orders)
	}
	invoices := map[string]string{} // order -> invoice eventId
	for p := range 2 {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.kafka.Brokers(), Topic: "invoices", Partition: p, MaxWait: 50 * time.Millisecond})
		for {
			rc, c := context.WithTimeout(ctx, 3*time.Second)
			m, err := r.ReadMessage(rc)
			c()
			if err != nil {
				break
			}
			invoices[string(m.Key)] = header(m, "eventId")
			if header(m, "type") != "InvoiceRequested" {
				t.Errorf("invoice for %s without its type header: %v", m.Key, m.Headers)
			}
		}
		_ = r.Close()
	}
	if len(invoices) != orders {
		t.Errorf("%d invoices published, want %d", len(invoices), orders)
	}
	for order, invoice := range invoices {
		if !ok[order] {
			t.Errorf("an invoice was published for order %s, which failed or was not applied", order)
		}
		if id, err := uuid.Parse(invoice); err != nil || id.Version() != 7 {
			t.Errorf("invoice for %s has eventId %q, want a UUID v7", order, invoice)
		}
	}
}
