package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

const valuesDroppedMetric = "idempotent_consumer_dead_letter_values_dropped_total"

// createTopic creates a topic with configs (e.g. max.message.bytes).
func createTopic(t testing.TB, k *consumertest.Kafka, topic string, parts int, configs map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.CreateTopic(ctx, topic, parts, configs); err != nil {
		t.Fatal(err)
	}
}

// produceLarge writes records of up to 8 MiB (the test writer's default
// BatchBytes is 1 MiB).
func produceLarge(t testing.TB, k *consumertest.Kafka, topic string, msgs ...kafka.Message) {
	t.Helper()
	w := consumertest.NewWriter(k.Brokers(), topic)
	w.BatchBytes = 8 << 20
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, m := range msgs { // one at a time: each is its own produce batch
		if err := w.WriteMessages(ctx, m); err != nil {
			t.Fatalf("producing to %s: %v", topic, err)
		}
	}
}

// paddedEvent is a JSON envelope of about size bytes.
func paddedEvent(t testing.TB, size int) (kafka.Message, uuid.UUID) {
	id := newID(t)
	return event(id, 0, `,"pad":"`+strings.Repeat("p", size)+`"`), id
}

// TestDeadLetterBatchSizedToTopicLimit (issue 12, defect 3): 30 dead letters
// of 50 KiB each, 1.5 MiB together, against a dead-letter topic whose
// max.message.bytes is 1 MiB. The runtime sizes its produce batches to the
// topic's limit, so every dead letter keeps its value.
func TestDeadLetterBatchSizedToTopicLimit(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const dlq, limit, n = "events.dlq-1m", 1 << 20, 30
	createTopic(t, e.kafka, dlq, 1, map[string]string{"max.message.bytes": strconv.Itoa(limit)})

	var msgs []kafka.Message
	want := map[string][]byte{} // offset -> value
	for i := range n {
		m, id := paddedEvent(t, 50<<10)
		e.failIDs.Store(id, consumer.Permanent(fmt.Errorf("ledger refused entry %d", i)))
		msgs = append(msgs, m)
	}
	e.kafka.Produce(t, e.topic, msgs...)
	for i, m := range msgs {
		want[strconv.Itoa(i)] = m.Value
	}

	cfg := e.config(func(c *consumer.Config) {
		c.DeadLetterTopic = dlq
		c.Envelope.MaxBytes = 64 << 10
		c.BatchWait = 3 * time.Second // all 30 in one batch, one WriteMessages call
	})
	r := e.start(cfg, nil)
	e.waitCaughtUp(t, 60*time.Second)

	got := readAll(t, e.kafka.Brokers(), dlq, 0, n, 20*time.Second)
	if len(got) != n {
		t.Fatalf("%d dead letters, want %d", len(got), n)
	}
	lost := 0
	for _, m := range got {
		off := header(m, consumer.HeaderDLQOriginalOffset)
		if !bytes.Equal(m.Value, want[off]) || header(m, consumer.HeaderDLQValueDropped) != "" {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d dead letters lost their value", lost, n)
	}
	if v := metricValue(t, scrape(t, r.c), valuesDroppedMetric); v != 0 {
		t.Fatalf("%s = %d, want 0", valuesDroppedMetric, v)
	}
}

// TestDeadLetterLargerThanLimit (issue 12, defect 4): a dead letter that
// alone exceeds the dead-letter topic's max.message.bytes (and the old
// writer's BatchBytes) is written without its value, marked and counted; the
// partition moves on, and the other dead letters of the same batch keep
// their values.
func TestDeadLetterLargerThanLimit(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const src, dlq, limit = "events.big", "events.big.dlq", 256 << 10
	createTopic(t, e.kafka, src, 1, map[string]string{"max.message.bytes": strconv.Itoa(8 << 20)})
	createTopic(t, e.kafka, dlq, 1, map[string]string{"max.message.bytes": strconv.Itoa(limit)})
	e.topic = src

	const maxBytes = 64 << 10
	big, _ := paddedEvent(t, maxBytes+(2<<20)+(100<<10)) // oversized, and larger than MaxBytes + 2 MiB
	small1, small2 := kafka.Message{Value: bytes.Repeat([]byte{0xff}, 20<<10)}, kafka.Message{Value: bytes.Repeat([]byte{0xfe}, 20<<10)}
	good := event(newID(t), 0, "")
	produceLarge(t, e.kafka, src, small1, big, small2, good)

	cfg := e.config(func(c *consumer.Config) {
		c.Topic = src
		c.DeadLetterTopic = dlq
		c.Envelope.MaxBytes = maxBytes
		c.BatchWait = 3 * time.Second
	})
	r := e.start(cfg, nil)
	e.waitCaughtUp(t, 45*time.Second)

	got := readAll(t, e.kafka.Brokers(), dlq, 0, 3, 20*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d dead letters, want 3", len(got))
	}
	byOffset := map[string]kafka.Message{}
	for _, m := range got {
		byOffset[header(m, consumer.HeaderDLQOriginalOffset)] = m
	}
	for off, want := range map[string][]byte{"0": small1.Value, "2": small2.Value} {
		m, ok := byOffset[off]
		if !ok || !bytes.Equal(m.Value, want) || header(m, consumer.HeaderDLQValueDropped) != "" {
			t.Errorf("dead letter of offset %s: %d value bytes, dropped %q; want its %d bytes", off, len(m.Value), header(m, consumer.HeaderDLQValueDropped), len(want))
		}
	}
	m, ok := byOffset["1"]
	switch {
	case !ok:
		t.Fatal("no dead letter for the oversized record")
	case len(m.Value) != 0 || header(m, consumer.HeaderDLQValueDropped) != "true":
		t.Fatalf("oversized dead letter: %d value bytes, %s=%q; want no value and true", len(m.Value), consumer.HeaderDLQValueDropped, header(m, consumer.HeaderDLQValueDropped))
	case header(m, "dlq-value-size") != strconv.Itoa(len(big.Value)):
		t.Fatalf("dlq-value-size = %q, want %d", header(m, "dlq-value-size"), len(big.Value))
	case header(m, consumer.HeaderDLQOriginalTopic) != src || header(m, consumer.HeaderDLQReason) != string(consumer.ReasonOversized):
		t.Fatalf("oversized dead letter's origin headers: topic %q reason %q", header(m, consumer.HeaderDLQOriginalTopic), header(m, consumer.HeaderDLQReason))
	}
	if v := metricValue(t, scrape(t, r.c), valuesDroppedMetric); v != 1 {
		t.Fatalf("%s = %d, want 1", valuesDroppedMetric, v)
	}
	logs := e.logBuf.String()
	wantLog := regexp.MustCompile(`level=ERROR msg="dead letter written without its value[^"]*" .*partition=0 offset=1 reason=oversized valueBytes=` + strconv.Itoa(len(big.Value)))
	if !wantLog.MatchString(logs) {
		t.Fatalf("no error log naming the record whose value was dropped (%s)", wantLog)
	}
	if strings.Contains(logs, strings.Repeat("p", 100)) {
		t.Fatal("the log holds the payload")
	}
	if rows, _ := e.effects(t); rows != 1 {
		t.Fatalf("%d effects, want the good event's 1", rows)
	}
}

// TestDeadLetterLimitLowered: the dead-letter topic's max.message.bytes is
// lowered while the consumer runs. The broker refuses the batch sized to the
// cached limit; the runtime reads the limit again and re-sends in smaller
// batches, every value kept.
func TestDeadLetterLimitLowered(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const dlq = "events.dlq-shrinks"
	createTopic(t, e.kafka, dlq, 1, map[string]string{"max.message.bytes": strconv.Itoa(1 << 20)})
	cfg := e.config(func(c *consumer.Config) {
		c.DeadLetterTopic = dlq
		c.Envelope.MaxBytes = 64 << 10
		c.BatchWait = 2 * time.Second
	})
	r := e.start(cfg, nil)
	// A first dead letter makes the runtime read (and cache) the 1 MiB limit.
	e.kafka.Produce(t, e.topic, kafka.Message{Value: []byte("not json")})
	e.waitCaughtUp(t, 30*time.Second)

	alterTopic(t, e.kafka, dlq, "max.message.bytes", strconv.Itoa(128<<10))

	const n = 8 // 8 x 40 KiB: more than 128 KiB together, each well under it
	var msgs []kafka.Message
	for i := range n {
		msgs = append(msgs, kafka.Message{Value: bytes.Repeat([]byte{byte(i)}, 40<<10)})
	}
	e.kafka.Produce(t, e.topic, msgs...)
	e.waitCaughtUp(t, 30*time.Second)

	got := readAll(t, e.kafka.Brokers(), dlq, 0, n+1, 20*time.Second)
	if len(got) != n+1 {
		t.Fatalf("%d dead letters, want %d", len(got), n+1)
	}
	for _, m := range got[1:] {
		if len(m.Value) != 40<<10 || header(m, consumer.HeaderDLQValueDropped) != "" {
			t.Fatalf("dead letter of offset %s: %d value bytes, dropped %q; want 40 KiB kept",
				header(m, consumer.HeaderDLQOriginalOffset), len(m.Value), header(m, consumer.HeaderDLQValueDropped))
		}
	}
	if v := metricValue(t, scrape(t, r.c), valuesDroppedMetric); v != 0 {
		t.Fatalf("%s = %d, want 0", valuesDroppedMetric, v)
	}
}

// TestDeadLetterLimitRaised: the dead-letter topic's max.message.bytes is
// raised while the consumer runs; a dead letter larger than the old limit and
// within the new one keeps its value (the runtime reads the limit again
// before it drops one).
func TestDeadLetterLimitRaised(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const dlq = "events.dlq-grows"
	createTopic(t, e.kafka, dlq, 1, map[string]string{"max.message.bytes": strconv.Itoa(128 << 10)})
	cfg := e.config(func(c *consumer.Config) {
		c.DeadLetterTopic = dlq
		c.Envelope.MaxBytes = 64 << 10
	})
	r := e.start(cfg, nil)
	e.kafka.Produce(t, e.topic, kafka.Message{Value: []byte("not json")}) // the runtime reads the 128 KiB limit
	e.waitCaughtUp(t, 30*time.Second)
	alterTopic(t, e.kafka, dlq, "max.message.bytes", strconv.Itoa(1<<20))

	big, _ := paddedEvent(t, 300<<10) // oversized for the envelope, dead-lettered
	e.kafka.Produce(t, e.topic, big)
	e.waitCaughtUp(t, 30*time.Second)
	got := readAll(t, e.kafka.Brokers(), dlq, 0, 2, 20*time.Second)
	if len(got) != 2 {
		t.Fatalf("%d dead letters, want 2", len(got))
	}
	if m := got[1]; !bytes.Equal(m.Value, big.Value) {
		t.Fatalf("the 300 KiB dead letter has %d value bytes (dropped %q), want its %d", len(m.Value), header(m, consumer.HeaderDLQValueDropped), len(big.Value))
	}
	if v := metricValue(t, scrape(t, r.c), valuesDroppedMetric); v != 0 {
		t.Fatalf("%s = %d, want 0", valuesDroppedMetric, v)
	}
}

// alterTopic sets one configuration of a topic.
func alterTopic(t testing.TB, k *consumertest.Kafka, topic, name, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(k.Brokers()...)}
	resp, err := client.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{Resources: []kafka.IncrementalAlterConfigsRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic,
		Configs: []kafka.IncrementalAlterConfigsRequestConfig{{Name: name, Value: value, ConfigOperation: kafka.ConfigOperationSet}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range resp.Resources {
		if res.Error != nil {
			t.Fatal(res.Error)
		}
	}
}

// TestDeadLetterLimitUnreadable: the runtime may not read the dead-letter
// topic's configuration (no DescribeConfigs permission). It assumes Kafka's
// default 1 MiB for batching, says so, and lets the broker judge each record
// larger than that: a 1.5 MiB dead letter fits the topic's real 2 MiB limit
// and keeps its value; only a 3 MiB one, which the broker refuses by itself,
// loses it.
func TestDeadLetterLimitUnreadable(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const src, dlq = "events.big", "events.big.dlq"
	createTopic(t, e.kafka, src, 1, map[string]string{"max.message.bytes": strconv.Itoa(8 << 20)})
	createTopic(t, e.kafka, dlq, 1, map[string]string{"max.message.bytes": strconv.Itoa(2 << 20)})
	e.topic = src
	e.kafka.Cluster().Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: dlq, Err: kerr.TopicAuthorizationFailed, Count: -1,
	})

	const maxBytes = 64 << 10
	fits, _ := paddedEvent(t, 3<<19) // 1.5 MiB
	over, _ := paddedEvent(t, 3<<20) // 3 MiB
	small := kafka.Message{Value: bytes.Repeat([]byte{0xff}, 20<<10)}
	produceLarge(t, e.kafka, src, fits, small, over)

	cfg := e.config(func(c *consumer.Config) {
		c.Topic = src
		c.DeadLetterTopic = dlq
		c.Envelope.MaxBytes = maxBytes
		c.BatchWait = 3 * time.Second
	})
	r := e.start(cfg, nil)
	e.waitCaughtUp(t, 45*time.Second)

	got := readAll(t, e.kafka.Brokers(), dlq, 0, 3, 20*time.Second)
	byOffset := map[string]kafka.Message{}
	for _, m := range got {
		byOffset[header(m, consumer.HeaderDLQOriginalOffset)] = m
	}
	for off, want := range map[string][]byte{"0": fits.Value, "1": small.Value} {
		if m := byOffset[off]; !bytes.Equal(m.Value, want) {
			t.Errorf("dead letter of offset %s: %d value bytes (dropped %q), want its %d bytes", off, len(m.Value), header(m, consumer.HeaderDLQValueDropped), len(want))
		}
	}
	if m := byOffset["2"]; len(m.Value) != 0 || header(m, consumer.HeaderDLQValueDropped) != "true" {
		t.Errorf("dead letter of offset 2: %d value bytes, dropped %q; want none and true", len(m.Value), header(m, consumer.HeaderDLQValueDropped))
	}
	if v := metricValue(t, scrape(t, r.c), valuesDroppedMetric); v != 1 {
		t.Errorf("%s = %d, want 1", valuesDroppedMetric, v)
	}
	if !strings.Contains(e.logBuf.String(), "cannot read the dead-letter topic's max.message.bytes") {
		t.Error("no warning that the limit could not be read")
	}
}
