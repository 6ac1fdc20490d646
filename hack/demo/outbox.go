package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// The outbox hop (docs/outbox.md): an order service writes each order and
// its OrderPlaced event in one transaction (outbox.Emit), and rolls back
// the orders it declines; two `consumer outbox-relay` processes publish the
// outbox (one owns the stream); a second IdempotentConsumer, "invoices",
// made by the operator like the first, consumes the orders topic (the id
// from the relay's CloudEvents ce_id header) and writes one invoice per
// order. The report's line
//
//	OUTBOX committed=... published=... applied_once=...
//
// counts the committed orders in the database, the distinct event ids in
// the topic and the invoices written exactly once.
const (
	outboxTopic     = "demo.orders"
	outboxTable     = "outbox"
	invoicesName    = "invoices"
	outboxRelays    = 2
	outboxDeclineOf = 10 // every 10th order is declined: rolled back with its event
)

var outboxDDL = []string{
	`CREATE TABLE IF NOT EXISTS orders (
		order_id text PRIMARY KEY,
		amount   bigint NOT NULL,
		event_id uuid NOT NULL UNIQUE
	)`,
	// No unique constraint: an order invoiced twice would show as two rows.
	`CREATE TABLE IF NOT EXISTS invoices (
		id       bigserial PRIMARY KEY,
		event_id uuid NOT NULL,
		order_id text NOT NULL,
		amount   bigint NOT NULL
	)`,
}

// invoiceStatement is the invoices consumer's SQL sink: $1 the event id
// (ce_id), $2 the order event's payload, $3 the record key (the order id).
const invoiceStatement = `INSERT INTO invoices (event_id, order_id, amount) VALUES ($1, convert_from($3, 'UTF8'), ($2::jsonb->>'amount')::bigint)`

// OutboxReport is the outbox hop's figures, all counted from the database
// and the topic.
type OutboxReport struct {
	Orders, Declined int // orders attempted; declined (rolled back with their event)
	Committed        int // order rows
	Records          int // records in the orders topic
	Published        int // distinct event ids in it
	PublishedNoOrder int // of them, ids with no order row (a declined order's): must be 0
	AppliedOnce      int // committed orders invoiced exactly once
	AppliedTwice     int // events invoiced more than once: must be 0
	AppliedUnknown   int // invoices of no committed order: must be 0
}

// runOutbox runs the outbox hop against the operator, PostgreSQL and the
// broker of the run.
func (s *system) runOutbox(ctx context.Context, ledger *unstructured.Unstructured, orders int) (*OutboxReport, error) {
	r := &OutboxReport{Orders: orders}
	s.step("outbox: the orders table and the outbox (outbox.Ensure), topic %s", outboxTopic)
	pool, err := pgxpool.New(ctx, s.dbURL)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	for _, ddl := range outboxDDL {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return r, err
		}
	}
	tbl := outbox.Table{Name: outboxTable, Interval: dedup.Daily}
	if err := outbox.Ensure(ctx, pool, tbl, "demo"); err != nil {
		return r, err
	}
	if _, err := outbox.Maintain(ctx, pool, tbl, time.Now(), 2, 168*time.Hour); err != nil {
		return r, err
	}
	for _, t := range []struct {
		name string
		n    int
	}{{outboxTopic, 2}, {outboxTopic + ".dlq", 1}} {
		if err := consumertest.CreateTopic(ctx, s.brokers, t.name, t.n, nil); err != nil {
			return r, err
		}
	}

	s.step("outbox: IdempotentConsumer %s consumes %s (CONSUMER_ENVELOPE=cloudevents: the id is the relay's ce_id header)", invoicesName, outboxTopic)
	ic, err := invoicesObject(ledger)
	if err != nil {
		return r, err
	}
	if err := s.k8s.Create(ctx, ic); err != nil {
		return r, fmt.Errorf("creating IdempotentConsumer %s: %w", invoicesName, err)
	}
	consumers, err := s.startConsumers(ctx, ic)
	s.invoiceConsumers = consumers
	if err != nil {
		return r, err
	}

	s.step("outbox: %d `consumer outbox-relay` processes (one owns the stream, the other stands by)", outboxRelays)
	var relays []*localstack.Consumer
	s.cl.Add(func() {
		for _, p := range relays {
			p.Stop(10 * time.Second)
		}
	})
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		envvars.Brokers + "=" + strings.Join(s.brokers, ","),
		envvars.DatabaseURL + "=" + s.dbURL,
		envvars.OutboxTable + "=" + outboxTable,
	}
	for i := range outboxRelays {
		p, err := localstack.StartConsumer("outbox-relay-"+strconv.Itoa(i+1), proc.Options{LogDir: s.work, Stream: s.verbose, Env: env}, filepath.Join(s.bin, "consumer"), "outbox-relay")
		if err != nil {
			return r, err
		}
		relays = append(relays, p)
	}

	s.step("outbox: writing %d orders, each with its event in one transaction; every %dth is declined (rolled back)", orders, outboxDeclineOf)
	for i := range orders {
		declined := i%outboxDeclineOf == outboxDeclineOf-1
		if err := placeOrder(ctx, pool, tbl, fmt.Sprintf("order-%04d", i), int64(10+i%90), declined); err != nil {
			return r, err
		}
		if declined {
			r.Declined++
		}
	}
	if err := waitInvoiced(ctx, pool, relays, consumers, 2*time.Minute); err != nil {
		return r, err
	}
	group, _, _ := unstructured.NestedString(ic.Object, "spec", "kafka", "groupID")
	if err := localstack.WaitForLagZero(ctx, s.brokers, group, outboxTopic, 2, time.Minute, func() *proc.Process { return firstExited(consumers) }); err != nil {
		return r, err
	}
	return r, countOutbox(ctx, pool, s.brokers, r)
}

// invoicesObject is the second IdempotentConsumer: the ledger's database,
// brokers and dedup settings, its own topic, group, table and sink.
func invoicesObject(ledger *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	spec, _, _ := unstructured.NestedMap(ledger.Object, "spec")
	ic := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ledger.GetAPIVersion(), "kind": ledger.GetKind(),
		"metadata": map[string]any{"name": invoicesName, "namespace": ledger.GetNamespace()},
		"spec":     spec,
	}}
	for _, f := range []struct {
		v    any
		path []string
	}{
		{outboxTopic, []string{"kafka", "topic"}},
		{"invoice-writer", []string{"kafka", "groupID"}},
		{"invoices_processed_event", []string{"database", "table"}},
		{int64(1), []string{"consumer", "replicas"}},
		{invoiceStatement, []string{"consumer", "sink", "sql", "statement"}},
		{[]any{map[string]any{"name": envvars.Envelope, "value": "cloudevents"}}, []string{"consumer", "env"}},
	} {
		if err := unstructured.SetNestedField(ic.Object, f.v, append([]string{"spec"}, f.path...)...); err != nil {
			return nil, err
		}
	}
	unstructured.RemoveNestedField(ic.Object, "spec", "kafka", "deadLetterTopic")
	return ic, nil
}

// placeOrder writes one order and its event in one transaction; a declined
// order is rolled back, event and all.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, tbl outbox.Table, orderID string, amount int64, declined bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	id, err := outbox.Emit(ctx, tx, tbl, outbox.Message{Topic: outboxTopic, Key: []byte(orderID),
		Payload: []byte(fmt.Sprintf(`{"orderId":%q,"amount":%d}`, orderID, amount)), Headers: map[string]string{"type": "OrderPlaced"}})
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (order_id, amount, event_id) VALUES ($1, $2, $3)`, orderID, amount, id); err != nil {
		return err
	}
	if declined {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// waitInvoiced waits until every committed order has an invoice.
func waitInvoiced(ctx context.Context, pool *pgxpool.Pool, relays, consumers []*localstack.Consumer, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	missing := -1
	for time.Now().Before(deadline) {
		for _, p := range append(append([]*localstack.Consumer{}, relays...), consumers...) {
			if p.Exited() {
				return fmt.Errorf("%s exited: %w\n%s", p.Name, p.ExitErr(), p.TailLog(30))
			}
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT FROM invoices i WHERE i.event_id = o.event_id)`).Scan(&missing); err == nil && missing == 0 {
			return nil
		}
		if !localstack.Sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("outbox: %d committed orders not invoiced within %s", missing, timeout)
}

// countOutbox fills r from the orders, the invoices and the topic.
func countOutbox(ctx context.Context, pool *pgxpool.Pool, brokers []string, r *OutboxReport) error {
	committed := map[uuid.UUID]bool{}
	rows, err := pool.Query(ctx, `SELECT event_id FROM orders`)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return err
	}
	for _, id := range ids {
		committed[id] = true
	}
	r.Committed = len(committed)
	published := map[uuid.UUID]bool{}
	for p := range 2 {
		err := localstack.ReadPartition(ctx, brokers, outboxTopic, p, func(m kafka.Message) {
			r.Records++
			for _, h := range m.Headers {
				if h.Key == "ce_id" {
					if id, err := uuid.Parse(string(h.Value)); err == nil {
						published[id] = true
					}
				}
			}
		})
		if err != nil {
			return err
		}
	}
	r.Published = len(published)
	for id := range published {
		if !committed[id] {
			r.PublishedNoOrder++
		}
	}
	rows, err = pool.Query(ctx, `SELECT event_id, count(*) FROM invoices GROUP BY event_id`)
	if err != nil {
		return err
	}
	var id uuid.UUID
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		switch {
		case !committed[id]:
			r.AppliedUnknown++
		case n == 1:
			r.AppliedOnce++
		default:
			r.AppliedTwice++
		}
		return nil
	})
	return err
}

// Check lists what does not add up: every committed order published and
// invoiced once, nothing of a declined one published.
func (r *OutboxReport) Check() []string {
	var p []string
	if r.Committed != r.Orders-r.Declined {
		p = append(p, fmt.Sprintf("outbox: %d orders committed, want %d", r.Committed, r.Orders-r.Declined))
	}
	if r.Published != r.Committed || r.PublishedNoOrder != 0 {
		p = append(p, fmt.Sprintf("outbox: %d events published (%d of declined orders), %d committed", r.Published, r.PublishedNoOrder, r.Committed))
	}
	if r.AppliedOnce != r.Committed || r.AppliedTwice != 0 || r.AppliedUnknown != 0 {
		p = append(p, fmt.Sprintf("outbox: %d orders invoiced once, %d twice, %d invoices of no order; %d committed", r.AppliedOnce, r.AppliedTwice, r.AppliedUnknown, r.Committed))
	}
	return p
}

// Print writes the outbox hop's lines.
func (r *OutboxReport) Print(w io.Writer) {
	fmt.Fprintf(w, "outbox: orders placed %d, declined (rolled back with their event) %d; topic %s holds %d records\n", r.Orders, r.Declined, outboxTopic, r.Records)
	fmt.Fprintf(w, "OUTBOX committed=%d published=%d applied_once=%d applied_twice=%d published_uncommitted=%d\n",
		r.Committed, r.Published, r.AppliedOnce, r.AppliedTwice, r.PublishedNoOrder)
}
