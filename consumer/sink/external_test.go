package sink_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestHTTPExternalUnderIdleTimeout: with idle_in_transaction_session_timeout
// at 2s for every session of the database (the runtime's own guard turned
// off, so the database's setting applies) and a provider that takes 200-500
// ms per request, the HTTP sink as an external handler delivers every event
// once: no transaction waits on a request, so none is ended by the server.
func TestHTTPExternalUnderIdleTimeout(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var db string
	if err := e.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s SET idle_in_transaction_session_timeout = '2s'`, pgx.Identifier{db}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	requests := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		h := fnv.New32a()
		h.Write([]byte(key))
		time.Sleep(time.Duration(200+h.Sum32()%300) * time.Millisecond)
		mu.Lock()
		requests[key]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	h, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL + "/charge", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	var msgs []kafka.Message
	var ids []uuid.UUID
	var keys []string
	for i := range n {
		id, key := uuid.Must(uuid.NewV7()), "k"+strconv.Itoa(i%12)
		if i%5 == 4 { // 20% duplicates under their own key
			id, key = ids[len(ids)-2], keys[len(keys)-2]
		} else {
			ids, keys = append(ids, id), append(keys, key)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(key), Value: []byte(`{"eventId":"` + id.String() + `","amount":5}`)})
	}
	e.kafka.Produce(t, "events", msgs...)
	cfg := e.config()
	cfg.IdleInTransactionTimeout = -1
	cfg.BatchWait = 100 * time.Millisecond
	c, err := consumer.NewExternal(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	deadline := time.Now().Add(60 * time.Second)
	var rows int
	for time.Now().Before(deadline) {
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows >= len(ids) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var setting string
	conn, err := pgx.Connect(ctx, e.dsn) // a new session gets the database's setting
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&setting); err != nil || setting != "2s" {
		t.Fatalf("the database's setting is %q (%v), want 2s", setting, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if rows != len(ids) {
		t.Fatalf("%d ids recorded, want %d", rows, len(ids))
	}
	for _, id := range ids {
		if requests[id.String()] != 1 {
			t.Fatalf("id %s reached the provider %d times, want once", id, requests[id.String()])
		}
	}
	t.Logf("%d records, %d unique ids: each delivered once, under a 2s idle_in_transaction_session_timeout", n, len(ids))
}
