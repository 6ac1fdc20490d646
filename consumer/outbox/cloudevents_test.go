package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/envelope"
	"github.com/idempotency-dev/operator/consumer/outbox"
)

// TestRelay_RecordsCarryTheirIdForTheConsumer: the project's own consumer
// reads the id of a relayed record. The emit function makes the eventId, so
// it is not in the payload; the relay publishes it as the CloudEvents
// binding's ce_id (binary mode), which the envelope's cloudevents and auto
// modes read. Before, only an eventId header carried it, which no envelope
// mode reads: "missing_id: no \"eventId\" field" (json, auto) and "no ce_id
// header" (cloudevents). A user's ce_type replaces the default (the topic);
// a user's ce_id cannot replace the eventId.
func TestRelay_RecordsCarryTheirIdForTheConsumer(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "invoices", 1)
	var plain, typed string
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		id, err := outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: "invoices", Key: []byte("c-1"), Payload: []byte(`{"amount":5}`)})
		if err != nil {
			return err
		}
		plain = id.String()
		id, err = outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: "invoices", Key: []byte("c-1"), Payload: []byte(`{"amount":6}`),
			Headers: map[string]string{"ce_type": "invoice.requested", "ce_id": "not-the-id"}})
		typed = id.String()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.start(t, nil)
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.kafka.Brokers(), Topic: "invoices", Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	for i, want := range []struct{ id, typ string }{{plain, "invoices"}, {typed, "invoice.requested"}} {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		m, err := r.ReadMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("reading record %d: %v", i, err)
		}
		hs := make([]envelope.Header, len(m.Headers))
		for j, h := range m.Headers {
			hs[j] = envelope.Header{Key: h.Key, Value: h.Value}
		}
		for _, mode := range []envelope.Mode{envelope.ModeAuto, envelope.ModeCloudEvents} {
			d, err := envelope.Decode(m.Value, hs, envelope.Options{Mode: mode})
			if err != nil {
				t.Fatalf("record %d, envelope mode %s: %v (headers %v)", i, mode, err, m.Headers)
			}
			if d.ID.String() != want.id || d.Type != want.typ || string(d.Payload) != string(m.Value) {
				t.Errorf("record %d, mode %s: id %s type %q payload %s, want id %s type %q", i, mode, d.ID, d.Type, d.Payload, want.id, want.typ)
			}
		}
		src := ""
		for _, h := range m.Headers {
			if h.Key == "ce_source" {
				src = string(h.Value)
			}
		}
		if src != "/outbox/"+e.tbl.String() {
			t.Errorf("record %d: ce_source %q, want /outbox/%s", i, src, e.tbl)
		}
	}
}
