package sink_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestHTTPRetryableAnswersAreNotDeadLettered (issue 24, item 1): a provider
// that answers 409 while a request with the same key is still being
// processed, and one that rate-limits with 429 and "Retry-After: 2" for
// about two seconds, with 2 attempts and a 10-50 ms backoff: both events
// must be applied and recorded, not dead-lettered; the rate-limited one is
// called again only after the Retry-After pause, which used no attempt.
func TestHTTPRetryableAnswersAreNotDeadLettered(t *testing.T) {
	busy, limited := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	var (
		mu        sync.Mutex
		requests  = map[string][]time.Time{}
		limitTill time.Time // two seconds after the first request of the rate-limited id
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		requests[key] = append(requests[key], time.Now())
		n := len(requests[key])
		if key == limited.String() && n == 1 {
			limitTill = time.Now().Add(2 * time.Second)
		}
		till := limitTill
		mu.Unlock()
		switch {
		case key == busy.String() && n <= 4: // "a request with this key is still being processed"
			w.WriteHeader(http.StatusConflict)
		case key == limited.String() && time.Now().Before(till):
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	h, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL + "/charge", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.kafka.Produce(t, "events",
		kafka.Message{Key: []byte("a"), Value: []byte(`{"eventId":"` + busy.String() + `"}`)},
		kafka.Message{Key: []byte("b"), Value: []byte(`{"eventId":"` + limited.String() + `"}`)})
	cfg := e.config()
	cfg.HandlerMaxAttempts = 2
	c, err := consumer.NewExternal(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var rows int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows == 2 {
			break
		}
	}
	dlq := readDLQ(t, e.kafka.Brokers(), 1, time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range dlq {
		var reason string
		for _, hd := range m.Headers {
			if hd.Key == "dlq-error" {
				reason = string(hd.Value)
			}
		}
		t.Errorf("dead-lettered after a retryable answer: %s (%s)", m.Value, reason)
	}
	if rows != 2 {
		t.Fatalf("%d ids recorded, want 2 (requests: busy %d, limited %d)", rows, len(requests[busy.String()]), len(requests[limited.String()]))
	}
	lim := requests[limited.String()]
	if len(lim) < 2 {
		t.Fatalf("the rate-limited id had %d requests, want the 429 and a retry", len(lim))
	}
	if gap := lim[1].Sub(lim[0]); gap < 1900*time.Millisecond {
		t.Errorf("retried %v after a 429 with Retry-After: 2, want about 2s", gap)
	}
	t.Logf("busy id: %d requests; rate-limited id: %d requests", len(requests[busy.String()]), len(lim))
}

// TestHTTPRetryAfterAndOptOut: Retry-After in seconds and as an HTTP date on
// 429 and 503 becomes the RetryLater pause; a 503 without it uses an
// attempt; an API that answers 409 for a real conflict drops 409 from
// RetryableStatuses and gets it dead-lettered at once; malformed status
// lists are refused.
func TestHTTPRetryAfterAndOptOut(t *testing.T) {
	var status int
	var retryAfter string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	ev := &consumer.Event{ID: uuid.Must(uuid.NewV7()), Payload: []byte(`{}`)}
	h, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		status     int
		retryAfter string
		later      bool
		min, max   time.Duration
	}{
		{429, "3", true, 3 * time.Second, 3 * time.Second},
		{503, "7", true, 7 * time.Second, 7 * time.Second},
		{429, time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat), true, 3 * time.Second, 5 * time.Second},
		{503, time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), true, 0, 10 * time.Millisecond},
		{429, "", true, 0, 0},
		{429, "soon", true, 0, 0},
		{503, "", false, 0, 0},
		{500, "5", false, 0, 0},
	} {
		status, retryAfter = tt.status, tt.retryAfter
		err := h(context.Background(), ev)
		d, later := consumer.RetryLaterAfter(err)
		if later != tt.later || d < tt.min || d > tt.max || consumer.IsPermanent(err) {
			t.Errorf("%d Retry-After %q: %v (retry later %v after %v), want retry later %v after %v..%v", tt.status, tt.retryAfter, err, later, d, tt.later, tt.min, tt.max)
		}
	}
	sts, err := sink.ParseStatuses("408, 425,429,500-599")
	if err != nil {
		t.Fatal(err)
	}
	strict, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL, RetryableStatuses: sts})
	if err != nil {
		t.Fatal(err)
	}
	status, retryAfter = 409, ""
	if err := strict(context.Background(), ev); !consumer.IsPermanent(err) {
		t.Errorf("409 with 409 not retryable: %v, want Permanent", err)
	}
	status = 425
	if _, later := consumer.RetryLaterAfter(strict(context.Background(), ev)); !later {
		t.Error("425 is still retryable")
	}
	for _, bad := range []string{"200", "409,abc", "599-500", "600"} {
		if _, err := sink.ParseStatuses(bad); err == nil {
			t.Errorf("ParseStatuses(%q) accepted", bad)
		}
	}
	if _, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL, RetryableStatuses: []int{302}}); err == nil {
		t.Error("a retryable 302 accepted")
	}
}
