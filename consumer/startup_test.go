package consumer_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// topicLateFirstApply starts a consumer (RetryBackoffMax at its default, as
// in production) on a topic that does not exist yet, lets it wait long
// enough for a growing backoff to pass several seconds, creates the topic
// and its dead-letter topic, produces one event, and returns how long after
// the topic's creation its effect was there. The consumer reports not
// ready, naming the topic, while it waits.
func topicLateFirstApply(t *testing.T, e *env, wait time.Duration) time.Duration {
	t.Helper()
	e.topic, e.dlq = "late", "late.dlq"
	cfg := e.config(func(c *consumer.Config) {
		c.Topic, c.DeadLetterTopic = e.topic, e.dlq
		c.RetryBackoffMax = 0 // the default
	})
	r := e.start(cfg, nil)
	defer func() { _ = r.stop(t) }()
	waitNotReady(t, r.c, "topic does not exist: late")
	time.Sleep(wait)
	created := time.Now()
	e.kafka.MustCreateTopic(t, e.dlq, 1)
	e.kafka.MustCreateTopic(t, e.topic, 1)
	ids := produceIDs(t, e, 1)
	waitFor(t, 30*time.Second, "the first event on the topic created later to take effect", func() (bool, string) {
		n := e.effectsOf(t, ids)
		return n == 1, fmt.Sprintf("%d effects", n)
	})
	return time.Since(created)
}

// partitionAddedFirstApply runs a consumer on a 1-partition topic, adds a
// second partition, produces one event to it, and returns how long after
// the partition was added its effect was there. With StartLatest the new
// partition must still be read from its beginning: its records are all new.
func partitionAddedFirstApply(t *testing.T, e *env, start string) time.Duration {
	t.Helper()
	cfg := e.config(func(c *consumer.Config) { c.StartOffset = start })
	r := e.start(cfg, nil)
	defer func() { _ = r.stop(t) }()
	waitReady(t, r.c)
	// Under StartLatest, what is written before the partition's start is
	// resolved is skipped: wait for it.
	waitFor(t, 30*time.Second, "partition 0 to start", func() (bool, string) {
		return strings.Contains(e.logBuf.String(), "partition assigned"), "not yet"
	})
	first := produceIDs(t, e, 1)
	waitFor(t, 30*time.Second, "the first event", func() (bool, string) {
		n := e.effectsOf(t, first)
		return n == 1, fmt.Sprintf("%d effects", n)
	})
	client := &kafka.Client{Addr: kafka.TCP(e.kafka.Brokers()...), Timeout: 10 * time.Second}
	res, err := client.CreatePartitions(context.Background(), &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: e.topic, Count: 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Errors[e.topic]; err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	id := newID(t)
	// Straight to the new partition's leader: a writer's partition list
	// may not show it yet.
	waitFor(t, 30*time.Second, "a write to the added partition", func() (bool, string) {
		conn, err := kafka.DialLeader(context.Background(), "tcp", e.kafka.Brokers()[0], e.topic, 1)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		m := event(id, 1, "")
		_, err = conn.WriteMessages(kafka.Message{Key: m.Key, Value: m.Value, Headers: m.Headers})
		return err == nil, errString(err)
	})
	waitFor(t, 60*time.Second, "the event on the added partition to take effect", func() (bool, string) {
		n := e.effectsOf(t, []uuid.UUID{id})
		return n == 1, fmt.Sprintf("%d effects", n)
	})
	return time.Since(added)
}

// TestTopicCreatedLater: a consumer started before its topic exists (the
// usual GitOps order: the consumer and the topic applied in one sync)
// waits, not ready and saying why, and consumes the topic once it appears,
// however long it waited (the dependency checks stay at most a second
// apart).
func TestTopicCreatedLater(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	d := topicLateFirstApply(t, e, 4*time.Second)
	t.Logf("first apply %s after the topic was created", d.Round(time.Millisecond))
}

// TestPartitionAddedIsReadFromItsStart: a partition added to a live topic is
// picked up, and read from its beginning even under StartLatest (Kafka's
// "latest" would skip what was written to it before its first assignment).
func TestPartitionAddedIsReadFromItsStart(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	d := partitionAddedFirstApply(t, e, consumer.StartLatest)
	t.Logf("first apply %s after the partition was added", d.Round(time.Millisecond))
}

// TestBenchStartup prints how soon the first event takes effect after its
// topic appears (consumer started 10 s before) and after a partition is
// added to a live topic:
//
//	RESULT startup topic_late_first_apply_ms=... partition_added_first_apply_ms=... pass=...
//
// Targets: 3000 and 10000 ms.
func TestBenchStartup(t *testing.T) {
	if os.Getenv("CONSUMER_BENCH_STARTUP") == "" {
		t.Skip("set CONSUMER_BENCH_STARTUP=1 to run the benchmark")
	}
	late := topicLateFirstApply(t, newEnv(t), 10*time.Second)
	added := partitionAddedFirstApply(t, newEnv(t), consumer.StartLatest)
	fmt.Printf("RESULT startup topic_late_first_apply_ms=%d partition_added_first_apply_ms=%d pass=%t (targets: topic_late_first_apply_ms<=3000, partition_added_first_apply_ms<=10000)\n",
		late.Milliseconds(), added.Milliseconds(), late <= 3*time.Second && added <= 10*time.Second)
}
