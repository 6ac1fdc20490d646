package sink_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// The sink's credentials in TestHTTPSecretsStayOut.
const (
	authToken = "tok-AUTH-5f1e2d3c4b5a"
	pathToken = "PATHTOKEN-a8b7c6d5e4f3a2b1"
	queryTok  = "qtok-0f9e8d7c6b"
)

// echoServer answers events of type "echo" with a 401 whose body repeats the
// Authorization header (as some providers do), and drops the connection
// without an answer for every other event (an error that names the URL).
func echoServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Event-Type") == "echo" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte("invalid credentials in Authorization: " + r.Header.Get("Authorization") + " for " + r.URL.RequestURI()))
			return
		}
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func assertNoSecret(t *testing.T, where, s string) {
	t.Helper()
	for _, sec := range []string{authToken, pathToken, queryTok} {
		if strings.Contains(s, sec) {
			t.Errorf("%s holds the secret %q: %.300s", where, sec, s)
		}
	}
}

// TestHTTPSecretsStayOut (issue 12, redaction): neither the Authorization
// value a provider echoes nor a token in the sink URL's path or query reaches
// a handler error, a dead letter's headers or the log.
func TestHTTPSecretsStayOut(t *testing.T) {
	srv := echoServer(t)
	cfg := sink.HTTPConfig{
		URL:           srv.URL + "/hook/" + pathToken + "?key=" + queryTok,
		Authorization: "Bearer " + authToken,
		Timeout:       5 * time.Second,
	}
	h, err := sink.HTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("handler errors", func(t *testing.T) {
		for _, typ := range []string{"echo", "drop"} {
			err := h(context.Background(), nil, &consumer.Event{ID: uuid.Must(uuid.NewV7()), Type: typ, Payload: []byte(`{}`)})
			if err == nil {
				t.Fatalf("%s: no error", typ)
			}
			assertNoSecret(t, typ+" error", err.Error())
		}
	})

	t.Run("dead letters and log", func(t *testing.T) {
		e := newEnv(t)
		echoID, dropID := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
		e.kafka.Produce(t, "events",
			kafka.Message{Value: []byte(`{"eventId":"` + echoID.String() + `","type":"echo"}`)},
			kafka.Message{Value: []byte(`{"eventId":"` + dropID.String() + `","type":"drop"}`)},
		)
		logs := &consumertest.SyncBuffer{}
		ccfg := e.config()
		ccfg.HandlerMaxAttempts = 2
		ccfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c, err := consumer.New(ccfg, h)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		dlq := readDLQ(t, e.kafka.Brokers(), 2, 30*time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(dlq) != 2 {
			t.Fatalf("%d dead letters, want 2", len(dlq))
		}
		for _, m := range dlq {
			var hs strings.Builder
			for _, hd := range m.Headers {
				hs.WriteString(hd.Key + "=" + string(hd.Value) + "\n")
			}
			if !strings.Contains(hs.String(), "dlq-error=") {
				t.Fatalf("dead letter without dlq-error: %s", hs.String())
			}
			assertNoSecret(t, "dead-letter headers", hs.String())
		}
		assertNoSecret(t, "log", logs.String())
	})
}

// readDLQ reads up to want records of events.dlq.
func readDLQ(t *testing.T, brokers []string, want int, wait time.Duration) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "events.dlq", Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out []kafka.Message
	for len(out) < want {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			break
		}
		out = append(out, m)
	}
	return out
}
