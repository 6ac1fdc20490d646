package typescriptkafkajs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/outbox"
)

const (
	ordersTopic      = "orders"
	ordersPartitions = 3
	outboxOwner      = "7d1e9a52-example-ts-outbox"
)

// placed is one line of dist/outbox.js's output.
type placed struct {
	ID        string `json:"id"`
	EventID   string `json:"eventId"`
	Committed bool   `json:"committed"`
	Crashing  bool   `json:"crashing"`
	Error     string `json:"error"`
}

// order is one line of its input.
type order struct {
	ID          string `json:"id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amountCents"`
	Fail        string `json:"fail,omitempty"`
}

// TestTypeScriptOutbox runs src/outbox.ts, a TypeORM service that writes an
// order row and its event (the outbox's emit function) in one transaction,
// then the outbox relay to the broker, then src/consumer.ts on the topic:
//   - 60 orders of 6 customers, 4 workers at once; every 7th throws after
//     both writes, one order id is placed twice (the second insert fails
//     after its emit), and a last run is killed (SIGKILL) after both writes;
//   - the order rows and the outbox rows are exactly the committed orders;
//   - the relay publishes every committed order's event once, with its
//     eventId header, the customer as key and the payload written, none of
//     the rolled-back ones, and per customer in the order the orders were
//     placed;
//   - the consumer (EVENT_ID_HEADER=eventId) charges each event once, also
//     after the relay's cursor is reset and it publishes everything again.
func TestTypeScriptOutbox(t *testing.T) {
	node, npm := requireNode(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	type built struct {
		dir string
		err error
	}
	build := make(chan built, 1)
	go func() {
		dir, err := buildExample(ctx, node, npm, tmp)
		build <- built{dir, err}
	}()
	received := false
	defer func() {
		if !received {
			cancel()
			<-build
		}
	}()

	// The outbox, made as the relay's owner (or the operator) would, the
	// producer's orders table, the consumer's dedup table and ledger.
	dsn := consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tbl := outbox.Table{Name: "outbox"}
	if err := outbox.Ensure(ctx, pool, tbl, outboxOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Maintain(ctx, pool, tbl, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"sql/orders.sql", "sql/ledger.sql"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(b)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	ctl := buildDedupctl(t, ctx, tmp, dsn)
	ctl.run("create", "--schema", table.Schema, "--table", table.Name, "--premake", "2")
	brk := startBroker(t)
	if err := brk.createTopic(ctx, ordersTopic, ordersPartitions); err != nil {
		t.Fatal(err)
	}

	// The orders: per customer, seq is the order in which they are placed.
	var orders []order
	seq := map[string]int{} // order id -> position within its customer
	perCustomer := map[string]int{}
	for i := range 60 {
		c := fmt.Sprintf("cust-%d", i%6)
		o := order{ID: fmt.Sprintf("ord-%03d", i), Customer: c, AmountCents: 100 + i}
		if i%7 == 3 {
			o.Fail = "throw"
		}
		seq[o.ID] = perCustomer[c]
		perCustomer[c]++
		orders = append(orders, o)
	}
	// An order id placed again: the order insert fails after the emit.
	orders = append(orders, order{ID: orders[11].ID, Customer: orders[11].Customer, AmountCents: 1})

	b := <-build
	received = true
	if b.err != nil {
		t.Fatalf("building the example: %v", b.err)
	}
	dir := b.dir
	t.Logf("example built, outbox and topics made at %s", time.Since(start).Round(time.Millisecond))
	env := map[string]string{"DATABASE_URL": dsn, "OUTBOX_EMIT_FUNCTION": tbl.EmitFunction(), "OUTBOX_TOPIC": ordersTopic}

	results, err := runOutbox(ctx, node, dir, env, orders)
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string]placed{}  // event id -> result
	rolledBack := map[string]string{} // event id -> why
	customerOf := map[string]string{} // order id -> customer
	for _, o := range orders {
		customerOf[o.ID] = o.Customer
	}
	for _, r := range results {
		switch {
		case r.EventID == "":
			t.Errorf("order %s: no event id reported: %+v", r.ID, r)
		case r.Committed:
			committed[r.EventID] = r
		default:
			rolledBack[r.EventID] = r.Error
		}
	}
	wantCommitted, wantRolledBack := 0, 0
	for i, o := range orders {
		if o.Fail != "" || i == len(orders)-1 {
			wantRolledBack++
		} else {
			wantCommitted++
		}
	}
	if len(results) != len(orders) || len(committed) != wantCommitted || len(rolledBack) != wantRolledBack {
		t.Fatalf("outbox.js: %d results, %d committed, %d rolled back; want %d, %d, %d", len(results), len(committed), len(rolledBack), len(orders), wantCommitted, wantRolledBack)
	}
	// A crash: killed after both writes, before the commit.
	crash, err := runOutbox(ctx, node, dir, env, []order{{ID: "ord-crash", Customer: "cust-0", AmountCents: 7, Fail: "crash"}})
	if err == nil || len(crash) != 1 || !crash[0].Crashing || crash[0].EventID == "" {
		t.Fatalf("the crashing run: err %v, output %+v; want it killed after printing its event id", err, crash)
	}
	rolledBack[crash[0].EventID] = "killed before the commit"
	t.Logf("%d orders committed, %d rolled back (thrown, duplicate id, killed) at %s", len(committed), len(rolledBack), time.Since(start).Round(time.Millisecond))

	// The database holds exactly the committed orders and their events.
	var orderRows, outboxRows, joined int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM public.outbox),
		(SELECT count(*) FROM orders o JOIN public.outbox e ON e.event_id = o.event_id)`).Scan(&orderRows, &outboxRows, &joined); err != nil {
		t.Fatal(err)
	}
	if orderRows != len(committed) || outboxRows != len(committed) || joined != len(committed) {
		t.Errorf("orders %d rows, outbox %d rows, %d of them joined on event_id; want %d of each", orderRows, outboxRows, joined, len(committed))
	}

	// The relay, in-process, to the broker.
	relay := startRelay(t, pool, tbl, brk)
	recs := waitTopic(t, ctx, brk, len(committed))
	relay.stop()
	t.Logf("relay published %d records at %s", len(recs), time.Since(start).Round(time.Millisecond))
	if len(recs) != len(committed) {
		t.Errorf("%s holds %d records; want %d, one per committed order", ordersTopic, len(recs), len(committed))
	}

	seen := map[string]int{}
	lastSeq := map[string]int{} // customer -> seq of the last record
	for _, m := range recs {
		id := header(m, "eventId")
		seen[id]++
		if why, ok := rolledBack[id]; ok {
			t.Errorf("partition %d offset %d: event %s of a rolled-back order (%s) was published", m.Partition, m.Offset, id, why)
			continue
		}
		r, ok := committed[id]
		if !ok {
			t.Errorf("partition %d offset %d: eventId header %q is no committed order's event", m.Partition, m.Offset, id)
			continue
		}
		var p struct {
			Type    string `json:"type"`
			OrderID string `json:"orderId"`
		}
		if err := json.Unmarshal(m.Value, &p); err != nil || p.OrderID != r.ID || p.Type != "OrderPlaced" {
			t.Errorf("event %s: payload %s; want the OrderPlaced of %s", id, m.Value, r.ID)
		}
		cust := customerOf[r.ID]
		if string(m.Key) != cust || header(m, "type") != "OrderPlaced" {
			t.Errorf("event %s: key %q, type header %q; want %q, OrderPlaced", id, m.Key, header(m, "type"), cust)
		}
		if last, ok := lastSeq[cust]; ok && seq[r.ID] <= last {
			t.Errorf("customer %s: %s (placed %d-th) published after its %d-th order: per-key order broken", cust, r.ID, seq[r.ID], last)
		}
		lastSeq[cust] = seq[r.ID]
	}
	for id, r := range committed {
		if seen[id] != 1 {
			t.Errorf("order %s: its event %s published %d times, want once", r.ID, id, seen[id])
		}
	}

	// The consumer hop: src/consumer.ts takes the id from the eventId header.
	const group = "invoicing"
	prov := newProvider(t)
	cons := startProc(t, node, dir, "invoicing", map[string]string{
		"KAFKA_BROKERS": strings.Join(brk.addrs, ","), "KAFKA_TOPIC": ordersTopic, "KAFKA_GROUP_ID": group,
		"DEAD_LETTER_TOPIC": ordersTopic + ".dlq", "DATABASE_URL": dsn, "DEDUP_CLAIM_ONE_FUNCTION": table.ClaimOneFunction(),
		"CHARGE_URL": prov.url(group), "EVENT_ID_HEADER": "eventId", "SESSION_TIMEOUT_MS": "5000",
	})
	consumed := func() (bool, error) {
		l, err := brk.lag(ctx, group, ordersTopic, ordersPartitions)
		if err == nil && l > 0 {
			err = fmt.Errorf("%d records not committed", l)
		}
		return err == nil, err
	}
	waitFor(t, 60*time.Second, "the consumer to commit every record", consumed)

	// The relay again from the start (an explicit cursor reset): every
	// event is published a second time, and the consumer skips them all.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	from := uint64(1)
	if _, err := outbox.ResetCursor(ctx, conn, tbl, &from); err != nil {
		t.Fatalf("resetting the cursor: %v", err)
	}
	conn.Close(ctx)
	startRelay(t, pool, tbl, brk)
	waitTopic(t, ctx, brk, 2*len(committed))
	waitFor(t, 60*time.Second, "the consumer to commit the republished records", consumed)
	cons.stop(t)
	counts := cons.lastCounts()
	reqs := prov.snapshot(group)
	for id, r := range committed {
		if reqs[id] != 1 {
			t.Errorf("order %s: event %s charged %d times, want once", r.ID, id, reqs[id])
		}
	}
	for id := range reqs {
		if _, ok := committed[id]; !ok {
			t.Errorf("charged %s, no committed order's event", id)
		}
	}
	if counts["new"] != len(committed) || counts["duplicate"] < len(committed) {
		t.Errorf("consumer counts %v; want new=%d and duplicate>=%d (the republished events)", counts, len(committed), len(committed))
	}
	checkRows(t, ctx, pool, group, len(committed))
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// runOutbox runs dist/outbox.js with orders on its input and decodes its
// output; err is its exit error (with its standard error).
func runOutbox(ctx context.Context, node, dir string, env map[string]string, orders []order) ([]placed, error) {
	var in bytes.Buffer
	for _, o := range orders {
		b, _ := json.Marshal(o)
		in.Write(append(b, '\n'))
	}
	// Placing 60 orders takes a second or two; a hang (a pool exhausted by
	// a write outside the transaction) fails here, not at the test's end.
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "dist/outbox.js")
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var out []placed
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var p placed
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return out, fmt.Errorf("outbox.js printed %q: %w", sc.Text(), err)
		}
		out = append(out, p)
	}
	if runErr != nil {
		return out, fmt.Errorf("outbox.js: %w\n%s", runErr, stderr.String())
	}
	return out, nil
}

type testRelay struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *testRelay) stop() { r.cancel(); <-r.done }

// startRelay runs the outbox relay in-process until stop or the test's end.
func startRelay(t *testing.T, pool *pgxpool.Pool, tbl outbox.Table, brk *broker) *testRelay {
	t.Helper()
	cfg := outbox.Config{
		Table: tbl, ConnConfig: pool.Config().ConnConfig.Copy(), Brokers: brk.addrs,
		PollInterval: 100 * time.Millisecond, PublishTimeout: time.Second,
		Backoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	cfg.TakeoverDelay = 2*cfg.PublishTimeout + 100*time.Millisecond
	r, err := outbox.NewRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &testRelay{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	}()
	t.Cleanup(tr.stop)
	return tr
}

// waitTopic waits until the orders topic holds at least n records, then
// reads them all, partition by partition in offset order.
func waitTopic(t *testing.T, ctx context.Context, brk *broker, n int) []kafka.Message {
	t.Helper()
	var ends map[int]int64
	waitFor(t, 30*time.Second, fmt.Sprintf("%d records on %s", n, ordersTopic), func() (bool, error) {
		var err error
		if ends, err = brk.endOffsets(ctx, ordersTopic, ordersPartitions); err != nil {
			return false, err
		}
		total := int64(0)
		for _, e := range ends {
			total += e
		}
		// More than n: read them all, the caller says which are extra.
		return total >= int64(n), fmt.Errorf("%d records", total)
	})
	var out []kafka.Message
	for p := range ordersPartitions {
		if ends[p] == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brk.addrs, Topic: ordersTopic, Partition: p, MaxWait: 100 * time.Millisecond})
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for {
			m, err := r.ReadMessage(rctx)
			if err != nil {
				cancel()
				r.Close()
				t.Fatalf("reading %s/%d: %v", ordersTopic, p, err)
			}
			out = append(out, m)
			if m.Offset+1 >= ends[p] {
				break
			}
		}
		cancel()
		r.Close()
	}
	return out
}

func header(m kafka.Message, k string) string {
	for _, h := range m.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}
