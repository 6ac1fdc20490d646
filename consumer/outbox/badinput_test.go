package outbox_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
)

// TestRelay_BadInputIsNeitherSkippedNorLost: a row for a topic that does
// not exist, then a row larger than its topic's max.message.bytes. Each one
// stops the relay where it is (the rows after it wait too), is counted by
// reason and retried with backoff; once the operator fixes the cause (creates
// the topic, raises the limit) everything is published, in order.
func TestRelay_BadInputIsNeitherSkippedNorLost(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	if err := e.kafka.CreateTopic(ctx, "small", 1, map[string]string{"max.message.bytes": "1000"}); err != nil {
		t.Fatal(err)
	}
	// A stall timeout of two publish timeouts: the relay stays healthy
	// however long a row it cannot publish for what it is holds it (every
	// replica would fail alike; a restart would not help).
	r := e.start(t, func(c *outbox.Config) { c.StallTimeout = 2 * c.PublishTimeout })
	waitFor(t, 10*time.Second, "the relay to own the stream", r.owner)
	failures := func(reason string) float64 { return testutil.ToFloat64(r.metrics.Failures.WithLabelValues(reason)) }

	missing := e.emit(t, "missing", "k", []byte("to a topic that does not exist"))
	after := e.emit(t, "orders", "k", []byte("after"))
	waitFor(t, 20*time.Second, "three unknown_topic failures", func() bool { return failures(outbox.ReasonUnknownTopic) >= 3 })
	if got := e.readTopic(t, "orders", 1, 1, time.Second); len(got) != 0 {
		t.Fatalf("orders got %v while the row before it could not be published", got)
	}
	if n := testutil.ToFloat64(r.metrics.Published); n != 0 {
		t.Fatalf("published_total %v while stuck, want 0", n)
	}
	e.kafka.MustCreateTopic(t, "missing", 1)
	if got := e.readTopic(t, "missing", 1, 1, 20*time.Second); len(got) != 1 || got[0].id != missing.String() {
		t.Fatalf("missing got %v, want %s", got, missing)
	}
	if got := e.readTopic(t, "orders", 1, 1, 20*time.Second); len(got) != 1 || got[0].id != after.String() {
		t.Fatalf("orders got %v, want %s", got, after)
	}

	big := e.emit(t, "small", "k", []byte(strings.Repeat("x", 2000)))
	next := e.emit(t, "orders", "k", []byte("next"))
	waitFor(t, 20*time.Second, "three message_too_large failures", func() bool { return failures(outbox.ReasonMessageTooLarge) >= 3 })
	// The call's records for other partitions may be appended (the broker
	// refuses one partition's batch, not the call): they are sent again with
	// the retry, same eventId. The cursor does not move until all is acked.
	stuckAt := testutil.ToFloat64(r.metrics.Published)
	time.Sleep(3 * time.Second) // past the stall timeout
	if err := r.relay.Health(); err != nil {
		t.Errorf("Health while a record is too large: %v, want nil (not a stall a restart would cure)", err)
	}
	if n := testutil.ToFloat64(r.metrics.Published); n != stuckAt {
		t.Fatalf("published_total went from %v to %v while a row was too large", stuckAt, n)
	}
	if got := e.readTopic(t, "small", 1, 1, time.Second); len(got) != 0 {
		t.Fatalf("small got %v, want nothing while the row is too large", got)
	}
	client := &kafka.Client{Addr: kafka.TCP(e.kafka.Brokers()...)}
	res, err := client.AlterConfigs(ctx, &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: "small",
		Configs: []kafka.AlterConfigRequestConfig{{Name: "max.message.bytes", Value: "100000"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Errors {
		if e != nil {
			t.Fatal(e)
		}
	}
	if got := e.readTopic(t, "small", 1, 1, 20*time.Second); len(got) != 1 || got[0].id != big.String() {
		t.Fatalf("small got %v, want %s", got, big)
	}
	waitFor(t, 20*time.Second, "the relay to move on", func() bool { return testutil.ToFloat64(r.metrics.Published) > stuckAt })
	got := e.readTopic(t, "orders", 1, 3, 2*time.Second)
	if len(got) < 2 || got[0].id != after.String() || got[1].id != next.String() {
		t.Fatalf("orders got %v, want %s then %s (then maybe %s again)", got, after, next, next)
	}
}

// TestRelay_SplitsACallOverATopicsLowerLimit (review finding M4): records
// that each fit a topic's max.message.bytes, together over it. The broker
// refuses the call's record batch (MESSAGE_TOO_LARGE); the relay halves the
// call, down to single records, and publishes them all, in order, without
// waiting for anyone to raise the limit.
func TestRelay_SplitsACallOverATopicsLowerLimit(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	if err := e.kafka.CreateTopic(ctx, "tight", 1, map[string]string{"max.message.bytes": "1500"}); err != nil {
		t.Fatal(err)
	}
	// Six rows in one transaction: one page, one call.
	var ids []string
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		for i := range 6 {
			id, err := outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: "tight", Key: []byte("k"), Payload: []byte(fmt.Sprintf("%d%s", i, strings.Repeat("x", 500)))})
			if err != nil {
				return err
			}
			ids = append(ids, id.String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(t, nil)
	got := e.readTopic(t, "tight", 1, 6, 20*time.Second)
	var first []string // first occurrences: a split after a partial failure may repeat a record
	seen := map[string]bool{}
	for _, rec := range got {
		if !seen[rec.id] {
			seen[rec.id] = true
			first = append(first, rec.id)
		}
	}
	if !slices.Equal(first, ids) {
		t.Fatalf("tight got %v (message_too_large failures %v), want %v in order", first,
			testutil.ToFloat64(r.metrics.Failures.WithLabelValues(outbox.ReasonMessageTooLarge)), ids)
	}
}
