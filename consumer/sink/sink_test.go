package sink_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/sink"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

func TestParamCount(t *testing.T) {
	tests := []struct {
		stmt string
		want int
		err  bool
	}{
		{stmt: `INSERT INTO ledger(event_id, amount) VALUES ($1, ($2::jsonb->>'amount')::numeric)`, want: 2},
		{stmt: `SELECT $8, $1`, want: 8},
		{stmt: `SELECT '$5', "$6", $$ $7 $$, $tag$ $8 $tag$ -- $4
		, /* $3 */ $2`, want: 2},
		{stmt: `SELECT 'it''s $3', a$1 FROM t`, want: 0},
		{stmt: `SELECT $9`, err: true},
		{stmt: `SELECT $0`, err: true},
		{stmt: `SELECT 'open`, err: true},
		{stmt: `SELECT /* open`, err: true},
		{stmt: `SELECT $x$ open`, err: true},
		{stmt: ``, err: true},
		{stmt: strings.Repeat("x", sink.MaxStatementBytes+1), err: true},
	}
	for _, tt := range tests {
		got, err := sink.ParamCount(tt.stmt)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParamCount(%.60q) = %d, %v; want %d, err %v", tt.stmt, got, err, tt.want, tt.err)
		}
	}
}

// TestSQLParams runs the sink's statement directly against PostgreSQL and
// checks each parameter's value and type inference.
func TestSQLParams(t *testing.T) {
	pool := consumertest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (event_id uuid, amount numeric, body jsonb, k bytea,
		topic text, part int, off bigint, typ text, at timestamptz);
		CREATE TABLE raw (b bytea, t text)`); err != nil {
		t.Fatal(err)
	}
	// Each parameter gets one type per statement, inferred from its use.
	h, err := sink.SQL(sink.SQLConfig{Statement: `INSERT INTO ledger VALUES
		($1, ($2::jsonb->>'amount')::numeric, $2, $3, $4, $5, $6, $7, $8)`})
	if err != nil {
		t.Fatal(err)
	}
	asBytea, _ := sink.SQL(sink.SQLConfig{Statement: `INSERT INTO raw (b, t) VALUES ($2, convert_from($2, 'UTF8'))`})
	asText, _ := sink.SQL(sink.SQLConfig{Statement: `INSERT INTO raw (t) VALUES ($2)`})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := &consumer.Event{ID: uuid.Must(uuid.NewV7()), Payload: []byte(`{"amount": "12.50"}`), Key: []byte("k1"),
		Topic: "payments", Partition: 3, Offset: 42, Type: "payment.made", OccurredAt: at}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, h := range []consumer.Handler{h, asBytea, asText} {
		if err := h(ctx, tx, ev); err != nil {
			t.Fatal(err)
		}
	}
	var (
		id         uuid.UUID
		amount     string
		body       string
		key        []byte
		topic, typ string
		part       int
		off        int64
		gotAt      time.Time
	)
	if err := tx.QueryRow(ctx, `SELECT event_id, amount::text, body::text, k, topic, part, off, typ, at FROM ledger`).
		Scan(&id, &amount, &body, &key, &topic, &part, &off, &typ, &gotAt); err != nil {
		t.Fatal(err)
	}
	if id != ev.ID || amount != "12.50" || body != `{"amount": "12.50"}` || string(key) != "k1" || topic != "payments" ||
		part != 3 || off != 42 || typ != "payment.made" || !gotAt.Equal(at) {
		t.Fatalf("row = %v %s %s %q %s %d %d %s %v", id, amount, body, key, topic, part, off, typ, gotAt)
	}
	var raws []string
	rows, _ := tx.Query(ctx, `SELECT coalesce(convert_from(b, 'UTF8'), '') || '|' || t FROM raw ORDER BY b NULLS LAST`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		raws = append(raws, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := `{"amount": "12.50"}|{"amount": "12.50"}`; len(raws) != 2 || raws[0] != want || raws[1] != `|{"amount": "12.50"}` {
		t.Fatalf("bytea/text rows = %q", raws)
	}

	// A data error is permanent; a broken statement pauses the batch.
	bad := &consumer.Event{ID: uuid.Must(uuid.NewV7()), Payload: []byte(`not json`)}
	if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
		t.Fatal(err)
	}
	if err := h(ctx, tx, bad); !consumer.IsPermanent(err) {
		t.Errorf("invalid JSON payload: %v, want a permanent error", err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
		t.Fatal(err)
	}
	broken, _ := sink.SQL(sink.SQLConfig{Statement: `INSERT INTO no_such_table VALUES ($1)`})
	if err := broken(ctx, tx, ev); !consumer.IsUnavailable(err) {
		t.Errorf("missing table: %v, want Unavailable", err)
	}
}

func TestHTTPStatusClassification(t *testing.T) {
	status := 200
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		fmt.Fprint(w, "answer body")
	}))
	defer srv.Close()
	h, err := sink.HTTP(sink.HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ev := &consumer.Event{ID: uuid.Must(uuid.NewV7()), Payload: []byte(`{}`)}
	for _, tt := range []struct {
		status          int
		ok, perm, later bool
	}{
		{200, true, false, false}, {201, true, false, false}, {204, true, false, false},
		{400, false, true, false}, {404, false, true, false}, {422, false, true, false},
		{409, false, false, true}, {425, false, false, true}, {429, false, false, true},
		{408, false, false, false}, {500, false, false, false}, {503, false, false, false},
		{302, false, true, false},
	} {
		status = tt.status
		err := h(context.Background(), nil, ev)
		_, later := consumer.RetryLaterAfter(err)
		if (err == nil) != tt.ok || consumer.IsPermanent(err) != tt.perm || later != tt.later || consumer.IsUnavailable(err) {
			t.Errorf("status %d: err %v (permanent %v, retry later %v), want ok=%v permanent=%v retry later=%v", tt.status, err, consumer.IsPermanent(err), later, tt.ok, tt.perm, tt.later)
		}
	}
	// Nothing listening: Unavailable, not dead-lettered. The context carries
	// the event, as the runtime's does: its Idempotency-Key makes the POST
	// replayable, so a pooled connection the server closed is retried on a
	// new one (which is refused).
	srv.Close()
	if err := h(consumer.ContextWithEvent(context.Background(), ev), nil, ev); !consumer.IsUnavailable(err) {
		t.Errorf("connection refused: %v, want Unavailable", err)
	}
	if _, err := sink.HTTP(sink.HTTPConfig{URL: "ftp://x"}); err == nil {
		t.Error("ftp URL accepted")
	}
}

// TestHTTPLostResponse: the endpoint applies the first request and drops the
// connection without answering. The runtime retries with the same
// Idempotency-Key; the endpoint, deduplicating by key, applies the effect
// once and answers the retry; the event is processed once.
func TestHTTPLostResponse(t *testing.T) {
	var (
		mu      sync.Mutex
		keys    []string
		applied = map[string]int{}
		dropped = map[string]bool{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		keys = append(keys, key)
		if applied[key] == 0 {
			applied[key]++ // the effect happens...
		}
		drop := !dropped[key]
		dropped[key] = true
		mu.Unlock()
		if drop { // ...and the answer is lost
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	h, err := sink.HTTP(sink.HTTPConfig{URL: srv.URL + "/payments", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	id := uuid.Must(uuid.NewV7())
	e.kafka.Produce(t, "events", kafka.Message{Value: []byte(`{"eventId":"` + id.String() + `","amount":5}`)})
	var calls, succeeded atomic.Int64
	cfg := e.config()
	c, err := consumer.New(cfg, func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		calls.Add(1)
		err := h(ctx, tx, ev)
		if err == nil {
			succeeded.Add(1)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(keys)
		mu.Unlock()
		if n >= 2 && succeeded.Load() == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) < 2 {
		t.Fatalf("%d requests, want the lost one and its retry", len(keys))
	}
	for _, k := range keys {
		if k != id.String() {
			t.Fatalf("Idempotency-Key %q, want %s on every attempt (%v)", k, id, keys)
		}
	}
	if applied[id.String()] != 1 || succeeded.Load() != 1 {
		t.Fatalf("applied %d times, handler succeeded %d times; want 1 and 1", applied[id.String()], succeeded.Load())
	}
	t.Logf("%d HTTP requests over %d handler calls, all with key %s", len(keys), calls.Load(), id)
}

type env struct {
	kafka *consumertest.Kafka
	dsn   string
	pool  *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	e := &env{kafka: consumertest.NewKafka(t), dsn: consumertest.DatabaseURL(t)}
	e.kafka.MustCreateTopic(t, "events", 1)
	e.kafka.MustCreateTopic(t, "events.dlq", 1)
	pool, err := pgxpool.New(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.pool = pool
	eng, err := dedup.NewEngine(pool, dedup.Table{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := eng.EnsureTable(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Maintain(ctx, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) config() consumer.Config {
	level := slog.LevelWarn
	if os.Getenv("CONSUMER_TEST_LOGS") != "" {
		level = slog.LevelDebug
	}
	return consumer.Config{
		Brokers: e.kafka.Brokers(), Topic: "events", Group: "g", DatabaseURL: e.dsn,
		BatchWait: 10 * time.Millisecond, SessionTimeout: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		HandlerBackoff: 10 * time.Millisecond, HandlerBackoffMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	}
}

var _ = errors.New
