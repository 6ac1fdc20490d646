package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// v7At returns a UUID v7 whose timestamp is t.
func v7At(t testing.TB, at time.Time) uuid.UUID {
	id := newID(t)
	ms := at.UnixMilli()
	for i := 5; i >= 0; i-- {
		id[i] = byte(ms)
		ms >>= 8
	}
	return id
}

// TestBadInputMatrix: each kind of bad record is dead-lettered with its
// reason and origin in headers, the offset moves past it, and the good
// events around it are processed.
func TestBadInputMatrix(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	failing := newID(t)
	permanent := newID(t)
	e.failIDs.Store(failing, errors.New("ledger rejected the entry"))
	e.failIDs.Store(permanent, consumer.Permanent(errors.New("400 bad request")))
	good1, good2 := newID(t), newID(t)
	old := v7At(t, time.Now().Add(-30*24*time.Hour))
	future := v7At(t, time.Now().Add(365*24*time.Hour))

	cases := []struct {
		name   string
		msg    kafka.Message
		reason consumer.Reason // "" = processed
		id     uuid.UUID       // for the dlq-event-id header
	}{
		{name: "good before", msg: event(good1, 0, "")},
		{name: "not json", msg: kafka.Message{Value: []byte("\x00\x01 binary")}, reason: consumer.ReasonNotJSON},
		{name: "no id", msg: kafka.Message{Value: []byte(`{"type":"x"}`)}, reason: consumer.ReasonMissingID},
		{name: "not a uuid", msg: kafka.Message{Value: []byte(`{"eventId":"order-17"}`)}, reason: consumer.ReasonInvalidUUID},
		{name: "uuid v4", msg: kafka.Message{Value: []byte(`{"eventId":"` + uuid.New().String() + `"}`)}, reason: consumer.ReasonWrongUUIDVersion},
		{name: "oversized", msg: kafka.Message{Value: []byte(`{"eventId":"` + newID(t).String() + `","pad":"` + strings.Repeat("x", 5000) + `"}`)}, reason: consumer.ReasonOversized},
		{name: "older than retention", msg: event(old, 0, ""), reason: consumer.ReasonOutsideWindow, id: old},
		{name: "beyond premade partitions", msg: event(future, 0, ""), reason: consumer.ReasonOutsideWindow, id: future},
		{name: "handler keeps failing", msg: event(failing, 0, ""), reason: consumer.ReasonHandlerFailed, id: failing},
		{name: "handler permanent error", msg: event(permanent, 0, ""), reason: consumer.ReasonHandlerFailed, id: permanent},
		{name: "good after", msg: event(good2, 0, "")},
	}
	var msgs []kafka.Message
	for i, c := range cases {
		m := c.msg
		m.Partition = 0
		m.Key = []byte("key-" + strconv.Itoa(i))
		m.Headers = append(m.Headers, kafka.Header{Key: "origin", Value: []byte(c.name)}, kafka.Header{Key: "dlq-reason", Value: []byte("stale header from an earlier failure")})
		msgs = append(msgs, m)
	}
	e.kafka.Produce(t, e.topic, msgs...)

	cfg := e.config(func(c *consumer.Config) {
		c.Envelope.MaxBytes = 4096
		c.HandlerMaxAttempts = 3
	})
	r := e.start(cfg, nil)
	e.waitCaughtUp(t, 60*time.Second)

	var wantDLQ int
	for _, c := range cases {
		if c.reason != "" {
			wantDLQ++
		}
	}
	dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, wantDLQ, 10*time.Second)
	if len(dl) != wantDLQ {
		t.Fatalf("dead-letter topic has %d records, want %d", len(dl), wantDLQ)
	}
	i := 0
	for off, c := range cases {
		if c.reason == "" {
			continue
		}
		m := dl[i]
		i++
		t.Run(c.name, func(t *testing.T) {
			if got := header(m, consumer.HeaderDLQReason); got != string(c.reason) {
				t.Errorf("reason header %q, want %q (error: %s)", got, c.reason, header(m, consumer.HeaderDLQError))
			}
			if header(m, consumer.HeaderDLQError) == "" {
				t.Error("no error header")
			}
			if got := header(m, consumer.HeaderDLQOriginalTopic); got != e.topic {
				t.Errorf("original topic %q", got)
			}
			if got := header(m, consumer.HeaderDLQOriginalPartition); got != "0" {
				t.Errorf("original partition %q", got)
			}
			if got := header(m, consumer.HeaderDLQOriginalOffset); got != strconv.Itoa(off) {
				t.Errorf("original offset %q, want %d", got, off)
			}
			if got := header(m, consumer.HeaderDLQConsumerGroup); got != e.group {
				t.Errorf("group header %q", got)
			}
			if c.id != uuid.Nil {
				if got := header(m, consumer.HeaderDLQEventID); got != c.id.String() {
					t.Errorf("event id header %q, want %s", got, c.id)
				}
			}
			if got := header(m, "origin"); got != c.name {
				t.Errorf("original header not kept: %q", got)
			}
			var reasons int
			for _, h := range m.Headers {
				if h.Key == consumer.HeaderDLQReason {
					reasons++
				}
			}
			if reasons != 1 {
				t.Errorf("%d dlq-reason headers, want 1 (stale ones dropped)", reasons)
			}
			if string(m.Key) != string(msgs[off].Key) || string(m.Value) != string(msgs[off].Value) {
				t.Errorf("key/value not the original")
			}
			if c.reason == consumer.ReasonHandlerFailed {
				want := "3"
				if c.id == permanent {
					want = "1"
				}
				if got := header(m, consumer.HeaderDLQAttempts); got != want {
					t.Errorf("attempts header %q, want %s", got, want)
				}
			}
		})
	}

	rows, distinct := e.effects(t)
	if rows != 2 || distinct != 2 {
		t.Fatalf("%d effect rows (%d distinct), want the 2 good events", rows, distinct)
	}
	// A dead-lettered event leaves no dedup row: replaying it from the
	// dead-letter topic once fixed must not be skipped as a duplicate.
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`,
		[]uuid.UUID{failing, permanent, good1, good2}).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d dedup rows for the good and the failed events, want 2 (the good ones)", n)
	}

	// Replay the failed event once the handler is fixed: it takes effect.
	e.failIDs.Delete(failing)
	e.kafka.Produce(t, e.topic, event(failing, 0, ""))
	e.waitCaughtUp(t, 30*time.Second)
	if rows, _ := e.effects(t); rows != 3 {
		t.Fatalf("after replaying the fixed event: %d effect rows, want 3", rows)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, r.c)
	for _, want := range []string{
		`idempotent_consumer_dead_lettered_total{reason="not_json",topic="events"} 1`,
		`idempotent_consumer_dead_lettered_total{reason="outside_window",topic="events"} 2`,
		`idempotent_consumer_dead_lettered_total{reason="handler_failed",topic="events"} 2`,
		`idempotent_consumer_out_of_window_total{topic="events"} 2`,
		`idempotent_consumer_events_processed_total{topic="events"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func scrape(t testing.TB, c *consumer.Consumer) string {
	t.Helper()
	rec := newRecorder()
	req, _ := newRequest("GET", "/metrics")
	c.Handler().ServeHTTP(rec, req)
	return rec.Body.String()
}

// TestPolicies: Skip passes over without a dead letter, Process handles an
// out-of-window event without dedup, Stop makes Run return before the
// offset passes the event.
func TestPolicies(t *testing.T) {
	t.Run("skip and process", func(t *testing.T) {
		e := newEnv(t)
		e.dumpLogsOnFailure(t)
		old := v7At(t, time.Now().Add(-30*24*time.Hour))
		good := newID(t)
		e.kafka.Produce(t, e.topic,
			kafka.Message{Value: []byte("nope")},
			event(old, 0, ""),
			event(good, 0, ""),
		)
		var deduplicated []bool
		h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
			deduplicated = append(deduplicated, ev.Deduplicated)
			return e.handler(ctx, tx, ev)
		}
		r := e.start(e.config(func(c *consumer.Config) {
			c.Policies = map[consumer.Reason]consumer.Policy{
				consumer.ReasonNotJSON:       consumer.PolicySkip,
				consumer.ReasonOutsideWindow: consumer.PolicyProcess,
			}
		}), h)
		e.waitCaughtUp(t, 30*time.Second)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if rows, _ := e.effects(t); rows != 2 {
			t.Fatalf("%d effect rows, want 2", rows)
		}
		if fmt.Sprint(deduplicated) != "[false true]" {
			t.Fatalf("Deduplicated flags %v, want [false true]", deduplicated)
		}
		if dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, time.Second); len(dl) != 0 {
			t.Fatalf("%d dead letters, want none", len(dl))
		}
	})
	t.Run("stop", func(t *testing.T) {
		e := newEnv(t)
		e.dumpLogsOnFailure(t)
		e.kafka.Produce(t, e.topic,
			event(newID(t), 0, ""),
			event(newID(t), 0, ""),
		)
		r := e.start(e.config(func(c *consumer.Config) {
			c.Policies = map[consumer.Reason]consumer.Policy{consumer.ReasonMissingID: consumer.PolicyStop}
			c.BatchSize = 2
		}), nil)
		e.waitCaughtUp(t, 30*time.Second)
		e.kafka.Produce(t, e.topic,
			event(newID(t), 0, ""),
			kafka.Message{Value: []byte(`{"no":"id"}`)},
			event(newID(t), 0, ""),
		)
		err := r.wait(t, 30*time.Second)
		if !errors.Is(err, consumer.ErrStopped) || !strings.Contains(err.Error(), "missing_id") {
			t.Fatalf("Run returned %v, want ErrStopped for missing_id", err)
		}
		co, cerr := e.committed(context.Background())
		if cerr != nil {
			t.Fatal(cerr)
		}
		if co[0] > 3 {
			t.Fatalf("committed offset %d passed the stopping event at offset 3", co[0])
		}
	})
}
