package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// billingLedgerDDL is the application's ledger: its own unique key on
// event_id is what makes the ledger write idempotent, independently of the
// runtime's dedup table.
const billingLedgerDDL = `
CREATE TABLE billing_ledger (
	event_id     uuid PRIMARY KEY,
	account      text NOT NULL,
	amount_cents bigint NOT NULL,
	charge_id    text NOT NULL,
	recorded_at  timestamptz NOT NULL DEFAULT now());
CREATE TABLE billing_balance (
	account      text PRIMARY KEY,
	charged_cents bigint NOT NULL)`

// payment is the event payload of the billing example.
type payment struct {
	Account     string `json:"account"`
	AmountCents int64  `json:"amountCents"`
}

// biller is the billing example's external handler: a charge at the payment
// provider and a ledger row, each once in effect.
type biller struct {
	pool     *pgxpool.Pool
	client   *http.Client // with consumer.IdempotencyKeyTransport
	provider string       // URL of the provider's charge endpoint
	// afterCharge, when set, runs between the charge and the ledger write;
	// an error from it ends the call there, as a crash would.
	afterCharge func(ev *consumer.Event) error
}

// handle charges the provider with "Idempotency-Key: <event id>", then writes
// the ledger row in its own short transaction on the pool. Either step may
// run again for the same event (a retry, a crash, a rebalance); both are
// idempotent on the event id, so the effect is one charge and one row.
//
// An event whose ledger row exists is done: it is not charged again. So only
// a crash between the charge and the ledger commit repeats the charge, and a
// replay long after the provider has forgotten the key (Stripe may prune a key
// once it is 24 hours old) charges nothing twice.
func (b *biller) handle(ctx context.Context, ev *consumer.Event) error {
	var p payment
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return consumer.Permanent(fmt.Errorf("decoding the payment: %w", err))
	}
	if p.Account == "" || p.AmountCents <= 0 {
		return consumer.Permanent(fmt.Errorf("payment needs an account and a positive amountCents, got %q and %d", p.Account, p.AmountCents))
	}
	var done bool
	// Read without a transaction: a row that commits after this read (a
	// concurrent call of the same id) only means one more request with
	// the same key, which the provider deduplicates.
	if err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM billing_ledger WHERE event_id = $1)`, ev.ID).Scan(&done); err != nil {
		return consumer.Unavailable(fmt.Errorf("looking up the ledger row: %w", err))
	}
	if done {
		return nil
	}
	chargeID, err := b.charge(ctx, p)
	if err != nil {
		return err
	}
	if b.afterCharge != nil {
		if err := b.afterCharge(ev); err != nil {
			return err
		}
	}
	// The charge is made: its ledger row must follow, so a failure here is
	// Unavailable (retried until it succeeds, never dead-lettered with the
	// charge made and no row). No transaction is open during the charge;
	// this one lasts two statements. ON CONFLICT on the ledger's own key
	// makes a concurrent call of the same id (a duplicate held by another
	// process) a no-op, and the balance moves only when the row is new.
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO billing_ledger (event_id, account, amount_cents, charge_id)
			VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING`, ev.ID, p.Account, p.AmountCents, chargeID)
		if err != nil {
			return fmt.Errorf("writing the ledger row: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // written by a concurrent call of this event
		}
		if _, err := tx.Exec(ctx, `INSERT INTO billing_balance (account, charged_cents) VALUES ($1, $2)
			ON CONFLICT (account) DO UPDATE SET charged_cents = billing_balance.charged_cents + EXCLUDED.charged_cents`,
			p.Account, p.AmountCents); err != nil {
			return fmt.Errorf("updating the balance: %w", err)
		}
		return nil
	})
	if err != nil {
		return consumer.Unavailable(err)
	}
	return nil
}

// charge posts the payment; the transport adds the event id as the
// Idempotency-Key, so a repeat returns the provider's first answer.
func (b *biller) charge(ctx context.Context, p payment) (string, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return "", consumer.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.provider, bytes.NewReader(body))
	if err != nil {
		return "", consumer.Permanent(fmt.Errorf("building the charge request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("charging: %w", err) // retried with the same key
	}
	defer resp.Body.Close()
	var out struct {
		ChargeID string `json:"chargeId"`
	}
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return "", fmt.Errorf("charging: provider answered %s", resp.Status)
	case resp.StatusCode >= 400:
		return "", consumer.Permanent(fmt.Errorf("charging: provider refused: %s", resp.Status))
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Errorf("charging: reading the answer: %w", err)
	}
	if out.ChargeID == "" {
		return "", errors.New("charging: the answer has no charge id")
	}
	return out.ChargeID, nil
}

// Example_billing shows a handler that needs both an external effect and a
// row in PostgreSQL: it charges a payment provider with
// "Idempotency-Key: <eventId>" and then writes a ledger row in its own
// short transaction (see biller.handle and docs/consumer.md, "Billing: a
// charge and a ledger row").
func Example_billing() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	b := &biller{
		pool:     pool,
		client:   &http.Client{Transport: &consumer.IdempotencyKeyTransport{}, Timeout: 5 * time.Second},
		provider: "https://payments.example/v1/charges",
	}
	c, err := consumer.NewExternal(consumer.Config{
		Brokers:     []string{"kafka:9092"},
		Topic:       "billing.payments",
		Group:       "billing",
		DatabaseURL: os.Getenv("DATABASE_URL"),
		Ordering:    consumer.OrderingKey, // one account's charges in order
	}, b.handle)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = c.Run(ctx)
}

// fakeProvider is a payment provider that deduplicates on Idempotency-Key,
// as the source design requires: the first request with a key applies the
// charge, later ones get the same answer and apply nothing.
type fakeProvider struct {
	mu       sync.Mutex
	requests map[string]int    // per key
	applied  map[string]string // key -> charge id
	noKey    int
	total    int
}

func newFakeProvider() *fakeProvider {
	return &fakeProvider{requests: map[string]int{}, applied: map[string]string{}}
}

func (f *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(consumer.IdempotencyKeyHeader)
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	f.total++
	if key == "" {
		f.noKey++
		f.mu.Unlock()
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	f.requests[key]++
	id, ok := f.applied[key]
	if !ok {
		id = "ch_" + strconv.Itoa(len(f.applied)+1)
		f.applied[key] = id
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"chargeId":%q}`, id)
}

func (f *fakeProvider) snapshot() (requests map[string]int, applied map[string]string, total, noKey int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	requests = make(map[string]int, len(f.requests))
	for k, v := range f.requests {
		requests[k] = v
	}
	applied = make(map[string]string, len(f.applied))
	for k, v := range f.applied {
		applied[k] = v
	}
	return requests, applied, f.total, f.noKey
}

// TestBillingChargeAndLedger runs the billing example against the real
// broker and PostgreSQL and a provider that records each Idempotency-Key:
// duplicates on other partitions, a crash between the charge and the ledger
// write, a crash between the ledger write and the runtime recording the ids,
// a redelivery of the whole topic and a replay by a new group. Every unique
// id is charged (applied once at the provider) and has one ledger row, and
// each account's balance is the sum of its unique payments.
func TestBillingChargeAndLedger(t *testing.T) {
	e := newEnv(t, withPartitions(4))
	e.dumpLogsOnFailure(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, billingLedgerDDL); err != nil {
		t.Fatal(err)
	}
	prov := newFakeProvider()
	srv := httptest.NewServer(prov)
	t.Cleanup(srv.Close)

	// 120 payments over 12 accounts (the Kafka key); every third one again
	// on another partition.
	const n, accounts = 120, 12
	var msgs []kafka.Message
	want := map[string]int64{} // account -> charged cents
	ids := make([]uuid.UUID, n)
	for i := range n {
		ids[i] = newID(t)
		acct := "acct-" + strconv.Itoa(i%accounts)
		amount := int64(100 + i)
		want[acct] += amount
		m := event(ids[i], i%4, fmt.Sprintf(`,"account":%q,"amountCents":%d`, acct, amount))
		m.Key = []byte(acct)
		msgs = append(msgs, m)
		if i%3 == 0 {
			d := m
			d.Partition = (i + 1) % 4
			msgs = append(msgs, d)
		}
	}
	e.kafka.Produce(t, e.topic, msgs...)

	// Crash 1: the first attempt of every seventh id fails after its charge
	// and before its ledger write. The runtime calls it again: same key, the
	// provider applies nothing new, the ledger row is written.
	crashAfterCharge := map[uuid.UUID]bool{}
	for i := 0; i < n; i += 7 {
		crashAfterCharge[ids[i]] = true
	}
	var mu sync.Mutex
	crashedOnce := map[uuid.UUID]bool{}
	b := &biller{
		pool:     e.pool,
		client:   &http.Client{Transport: &consumer.IdempotencyKeyTransport{}, Timeout: 5 * time.Second},
		provider: srv.URL + "/v1/charges",
		afterCharge: func(ev *consumer.Event) error {
			mu.Lock()
			defer mu.Unlock()
			if crashAfterCharge[ev.ID] && !crashedOnce[ev.ID] {
				crashedOnce[ev.ID] = true
				return errors.New("simulated crash after the charge, before the ledger write")
			}
			return nil
		},
	}

	// Crash 2: the first recording transaction of the runtime never runs:
	// Run stops with charges made and ledger rows written for ids that are
	// not recorded. The next run calls them again; their ledger rows say
	// they are done, so they are not charged again. BatchWait is long so
	// that the first recording holds several ids.
	crash := errors.New("crash before recording")
	var unrecorded []uuid.UUID
	a := e.startExternal(e.config(func(c *consumer.Config) { c.BatchWait = 300 * time.Millisecond }), b.handle, func(c *consumer.Consumer) {
		consumer.SetBeforeRecordHook(c, func(_ int, batch []uuid.UUID) error {
			mu.Lock()
			defer mu.Unlock()
			if unrecorded == nil && len(batch) > 0 {
				unrecorded = append([]uuid.UUID(nil), batch...)
				return crash
			}
			return nil
		})
	})
	if err := a.wait(t, 60*time.Second); !errors.Is(err, crash) {
		t.Fatalf("Run returned %v, want the crash", err)
	}
	for _, id := range unrecorded {
		var rows int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM billing_ledger WHERE event_id = $1`, id).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 1 {
			t.Fatalf("id %s: %d ledger rows after the crash, want 1 (written before the runtime records)", id, rows)
		}
	}
	var recorded int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, unrecorded).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != 0 {
		t.Fatalf("%d of the %d ids of the crashed recording are recorded, want 0", recorded, len(unrecorded))
	}

	e.startExternal(e.config(), b.handle)
	e.waitCaughtUp(t, 60*time.Second)
	requests, _, total, _ := prov.snapshot()
	for _, id := range unrecorded {
		wantReq := 1 // its handler had finished: the repeat finds the ledger row
		if crashAfterCharge[id] {
			wantReq = 2 // and its first attempt crashed after the charge
		}
		if got := requests[id.String()]; got != wantReq {
			t.Errorf("id %s, charged and written to the ledger before the crash, was charged %d times in all; want %d", id, got, wantReq)
		}
	}
	for id := range crashAfterCharge {
		if requests[id.String()] < 2 {
			t.Errorf("id %s, crashed after its charge, was charged %d times; want again", id, requests[id.String()])
		}
	}
	checkBilling(t, e, prov, ids, want)
	if rows, distinct := e.dedupRows(t); rows != n || distinct != n {
		t.Fatalf("%d dedup rows (%d distinct), want %d", rows, distinct, n)
	}

	// Redelivery: the producer sends everything again. The ids are
	// recorded, so nothing reaches the provider or the ledger.
	e.kafka.Produce(t, e.topic, msgs...)
	e.waitCaughtUp(t, 60*time.Second)
	if _, _, again, _ := prov.snapshot(); again != total {
		t.Errorf("a redelivery of recorded ids sent %d requests to the provider, want 0", again-total)
	}
	checkBilling(t, e, prov, ids, want)

	// Replay by a new group (scope ConsumerGroup: its dedup rows are its
	// own): every id is called again, finds its ledger row and charges
	// nothing, even had the provider forgotten the keys.
	e.group = "billing-replay"
	e.startExternal(e.config(), b.handle)
	e.waitCaughtUp(t, 60*time.Second)
	checkBilling(t, e, prov, ids, want)
	if _, _, again, _ := prov.snapshot(); again != total {
		t.Errorf("a replay by a new group sent %d requests to the provider, want 0 (every id has its ledger row)", again-total)
	}
	if rows, distinct := e.dedupRows(t); rows != n || distinct != n {
		t.Fatalf("the replay group has %d dedup rows (%d distinct), want %d", rows, distinct, n)
	}
	t.Logf("%d unique ids, %d records, %d provider requests; %d ids crashed after the charge, %d after the ledger write",
		n, 2*len(msgs), total, len(crashAfterCharge), len(unrecorded))
}

// checkBilling asserts the effect: each id applied once at the provider (one
// key per id, no request without a key), one ledger row per id carrying the
// provider's charge id, and each account's balance.
func checkBilling(t *testing.T, e *env, prov *fakeProvider, ids []uuid.UUID, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	requests, applied, total, noKey := prov.snapshot()
	if noKey != 0 {
		t.Errorf("%d provider requests without an Idempotency-Key", noKey)
	}
	if len(requests) != len(ids) || len(applied) != len(ids) {
		t.Errorf("provider saw %d distinct keys (%d applied), want %d", len(requests), len(applied), len(ids))
	}
	for _, id := range ids {
		if requests[id.String()] == 0 {
			t.Errorf("id %s never charged", id)
		}
	}
	var rows, distinct int
	if err := e.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM billing_ledger`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != len(ids) || distinct != len(ids) {
		t.Errorf("%d ledger rows (%d distinct ids), want %d", rows, distinct, len(ids))
	}
	var wrongCharge int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM billing_ledger l
		WHERE l.charge_id <> ($1::jsonb ->> l.event_id::text)`, applied).Scan(&wrongCharge); err != nil {
		t.Fatal(err)
	}
	if wrongCharge != 0 {
		t.Errorf("%d ledger rows carry a charge id other than the provider's", wrongCharge)
	}
	got := map[string]int64{}
	brs, err := e.pool.Query(ctx, `SELECT account, charged_cents FROM billing_balance`)
	if err != nil {
		t.Fatal(err)
	}
	for brs.Next() {
		var acct string
		var cents int64
		if err := brs.Scan(&acct, &cents); err != nil {
			t.Fatal(err)
		}
		got[acct] = cents
	}
	if err := brs.Err(); err != nil {
		t.Fatal(err)
	}
	for acct, cents := range want {
		if got[acct] != cents {
			t.Errorf("account %s charged %d cents in the ledger, want %d", acct, got[acct], cents)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d accounts in the balance, want %d", len(got), len(want))
	}
	t.Logf("provider: %d requests, %d distinct keys, %d applied; ledger: %d rows", total, len(requests), len(applied), rows)
}
