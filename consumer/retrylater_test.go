package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestRetryLaterMaxBoundsThePauses: an external handler that keeps asking
// to be called again later (a provider answering 429 with Retry-After
// forever) pauses without using attempts only until its pauses add up to
// RetryLaterMax; the answers after that use attempts, and the event is
// dead-lettered as handler_failed instead of holding its partition forever.
// With RetryLaterMax negative, every such answer uses an attempt at once.
func TestRetryLaterMaxBoundsThePauses(t *testing.T) {
	for _, tt := range []struct {
		name          string
		retryLaterMax time.Duration
		minPauses     int // RetryLater pauses taken at least
		maxPauses     int
		minElapsed    time.Duration
	}{
		// 150ms asked each time, 600ms in all: 4 pauses (the last cut to
		// what is left), then 3 attempts.
		{"bounded", 600 * time.Millisecond, 4, 4, 600 * time.Millisecond},
		{"off", -1, 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.dumpLogsOnFailure(t)
			id := newID(t)
			var mu sync.Mutex
			var calls []time.Time
			h := func(ctx context.Context, ev *consumer.Event) error {
				mu.Lock()
				calls = append(calls, time.Now())
				mu.Unlock()
				return consumer.RetryLater(errors.New("429 Too Many Requests"), 150*time.Millisecond)
			}
			e.kafka.Produce(t, e.topic, kafka.Message{Partition: 0, Value: []byte(`{"eventId":"` + id.String() + `"}`)})
			start := time.Now()
			r := e.startExternal(e.config(func(c *consumer.Config) {
				c.RetryLaterMax = tt.retryLaterMax
				c.HandlerMaxAttempts = 3
				c.HandlerBackoff, c.HandlerBackoffMax = 10*time.Millisecond, 20*time.Millisecond
			}), h)
			got := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 30*time.Second)
			elapsed := time.Since(start)
			if len(got) != 1 {
				t.Fatalf("%d dead letters after %v, want the event dead-lettered once its RetryLater pauses are used up", len(got), elapsed)
			}
			if reason := headerValue(got[0], consumer.HeaderDLQReason); reason != string(consumer.ReasonHandlerFailed) {
				t.Errorf("dead-letter reason %q, want handler_failed", reason)
			}
			if a := headerValue(got[0], consumer.HeaderDLQAttempts); a != "3" {
				t.Errorf("dlq-attempts %q, want 3: the pauses within RetryLaterMax use no attempt", a)
			}
			mu.Lock()
			n := len(calls)
			mu.Unlock()
			pauses := metricValue(t, scrape(t, r.c), "idempotent_consumer_handler_retry_later_total")
			if pauses < tt.minPauses || pauses > tt.maxPauses {
				t.Errorf("%d RetryLater pauses, want %d..%d", pauses, tt.minPauses, tt.maxPauses)
			}
			if n != pauses+3 {
				t.Errorf("%d calls, want the %d pauses' calls and 3 attempts", n, pauses)
			}
			if elapsed < tt.minElapsed {
				t.Errorf("dead-lettered after %v, before RetryLaterMax %v of pauses", elapsed, tt.minElapsed)
			}
		})
	}
}

func headerValue(m kafka.Message, k string) string {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == k {
			return string(m.Headers[i].Value)
		}
	}
	return ""
}
