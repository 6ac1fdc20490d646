package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestEmit_RefusesARecordOverTheRelaysLimit: with a limit, the emit function
// reckons an event's record as the relay's messageSize does (its ce_time at
// the longest), so an event whose record is exactly the limit is emitted and
// one a byte over is refused in the emitting transaction (SQLSTATE 54000,
// the message naming topic, size and limit), whatever the key, headers and
// traceparent; with no limit, anything goes.
func TestEmit_RefusesARecordOverTheRelaysLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pool := consumertest.NewPool(t)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA shop"); err != nil {
		t.Fatal(err)
	}
	tbl := Table{Schema: "shop", Name: "orders_outbox"}
	const limit = 4000
	if err := Ensure(ctx, pool, tbl, "size-test", WithMaxMessageBytes(limit)); err != nil {
		t.Fatal(err)
	}
	if _, err := Maintain(ctx, pool, tbl, time.Now(), 1, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	source := "/outbox/" + tbl.WithDefaults().String()
	longest := time.Date(2026, 12, 6, 20, 0, 0, 999999999, time.UTC)
	emit := func(m Message) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := Emit(ctx, tx, tbl, m)
			return err
		})
	}
	for name, m := range map[string]Message{
		"bare":              {Topic: "orders"},
		"keyed":             {Topic: "orders.v2", Key: []byte("customer-42")},
		"headers":           {Topic: "orders", Key: []byte("k"), Headers: map[string]string{"tenant": "acme", "schema": "order.v3", "ünïcode": "välue"}},
		"traceparent":       {Topic: "t", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"replaces-ce_type":  {Topic: "orders", Headers: map[string]string{"ce_type": "com.example.order"}},
		"headers-and-trace": {Topic: "orders", Key: []byte("k"), Headers: map[string]string{"a": "b"}, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	} {
		headers := map[string]string{}
		for k, v := range m.Headers {
			headers[k] = v
		}
		if m.Traceparent != "" {
			headers["traceparent"] = m.Traceparent
		}
		r := row{id: uuid.New(), topic: m.Topic, key: m.Key, headers: headers, createdAt: longest}
		base := messageSize(r.message(source))
		// A header given that replaces the relay's own is counted twice by
		// the emit function: so much larger may its estimate be.
		slack := int64(0)
		if _, ok := m.Headers["ce_type"]; ok {
			slack = int64(len("ce_type") + len(m.Topic) + 8) // the default ce_type it replaces
		}
		fits := make([]byte, limit-base-slack)
		m.Payload = fits
		if err := emit(m); err != nil {
			t.Errorf("%s: a record of %d bytes (the limit, by the relay's reckoning) refused: %v", name, limit-slack, err)
		}
		m.Payload = append(fits, 'x')
		err := emit(m)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "54000" || !strings.Contains(pe.Message, m.Topic) || !strings.Contains(pe.Message, "4000 bytes") {
			t.Errorf("%s: a record a byte over the limit: %v, want SQLSTATE 54000 naming the topic and the limit", name, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM shop.orders_outbox").Scan(&n); err != nil || n != 6 {
		t.Errorf("%d rows in the outbox (err %v), want the 6 that fit", n, err)
	}

	if err := Ensure(ctx, pool, tbl, "size-test", WithMaxMessageBytes(0)); err != nil {
		t.Fatal(err)
	}
	if err := emit(Message{Topic: "orders", Payload: make([]byte, 2*limit)}); err != nil {
		t.Errorf("with no limit: %v", err)
	}
}

// TestEmit_RefusesATopicTheOutboxDoesNotPublishTo: with the outbox's topics
// given (an Outbox's spec.kafka.topics), an event to another topic (a typo,
// or a topic the emitter should not reach with the relay's Kafka identity)
// is refused in the emitting transaction, SQLSTATE 22023 naming the topic
// and the list; committed, it would hold the relay's stream (unknown topic)
// or publish where it should not.
func TestEmit_RefusesATopicTheOutboxDoesNotPublishTo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pool := consumertest.NewPool(t)
	tbl := Table{Name: "outbox"}
	if err := Ensure(ctx, pool, tbl, "topics-test", WithTopics([]string{"orders", "invoices.v2"})); err != nil {
		t.Fatal(err)
	}
	if _, err := Maintain(ctx, pool, tbl, time.Now(), 1, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	emit := func(topic string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := Emit(ctx, tx, tbl, Message{Topic: topic, Key: []byte("k")})
			return err
		})
	}
	for _, ok := range []string{"orders", "invoices.v2"} {
		if err := emit(ok); err != nil {
			t.Errorf("emitting to %q, one of the outbox's topics: %v", ok, err)
		}
	}
	for _, bad := range []string{"ledger-internal", "Orders", "orders "} {
		err := emit(bad)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, "topic '"+bad+"' is not one") || !strings.Contains(pe.Message, "(orders, invoices.v2)") {
			t.Errorf("emitting to %q: %v, want SQLSTATE 22023 naming it and the outbox's topics", bad, err)
		}
	}
	// A topic list is Kafka topic names only: they are written into the
	// function's dollar-quoted body (second review, finding 6).
	for _, bad := range []string{"x$idempotency_emit$; DROP TABLE outbox; --", "a b", "..", ""} {
		if err := Ensure(ctx, pool, tbl, "topics-test", WithTopics([]string{"orders", bad})); err == nil || !strings.Contains(err.Error(), "invalid topic") {
			t.Errorf("Ensure with topic %q: %v, want an invalid topic error", bad, err)
		}
	}
	// Without WithTopics, Ensure leaves the table's topic check as it is
	// (a standalone relay that ensures its table does not widen it).
	if err := Ensure(ctx, pool, tbl, "topics-test"); err != nil {
		t.Fatal(err)
	}
	if err := emit("ledger-internal"); err == nil {
		t.Error("Ensure without WithTopics widened the topic check")
	}
	// An empty list: any topic.
	if err := Ensure(ctx, pool, tbl, "topics-test", WithTopics(nil)); err != nil {
		t.Fatal(err)
	}
	if err := emit("ledger-internal"); err != nil {
		t.Errorf("with an empty topic list: %v", err)
	}
}
