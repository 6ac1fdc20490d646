package consumertest

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idempotency-dev/operator/internal/devkafka"
)

// Kafka is an in-process Kafka-protocol cluster (franz-go's kfake) that
// segmentio/kafka-go clients talk to over real TCP on loopback. The broker
// itself is internal/devkafka's (which cmd/devbroker uses too); Kafka adds
// the helpers that fail a test.
type Kafka struct {
	*devkafka.Broker
}

// KafkaOptions returns the cluster options the harness uses by default: one
// broker, group session timeouts down to 100ms so tests can rebalance quickly.
// Extra options passed to StartKafka are applied after these.
func KafkaOptions() []kfake.Opt { return devkafka.Options() }

// StartKafka starts a cluster; Close stops it.
func StartKafka(opts ...kfake.Opt) (*Kafka, error) {
	b, err := devkafka.Start(opts...)
	if err != nil {
		return nil, err
	}
	return &Kafka{Broker: b}, nil
}

// NewKafka starts a cluster for the test and closes it when the test ends.
func NewKafka(tb testing.TB, opts ...kfake.Opt) *Kafka {
	tb.Helper()
	k, err := StartKafka(opts...)
	if err != nil {
		tb.Fatalf("consumertest: %v", err)
	}
	tb.Cleanup(k.Close)
	return k
}

// MustCreateTopic is CreateTopic that fails the test on error.
func (k *Kafka) MustCreateTopic(tb testing.TB, topic string, partitions int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.CreateTopic(ctx, topic, partitions, nil); err != nil {
		tb.Fatalf("consumertest: %v", err)
	}
}

// Produce writes messages synchronously, failing the test on error.
func (k *Kafka) Produce(tb testing.TB, topic string, msgs ...kafka.Message) {
	tb.Helper()
	w := k.Writer(topic)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		tb.Fatalf("consumertest: producing to %s: %v", topic, err)
	}
}

// NewWriter returns a synchronous acks=all kafka-go writer without batching delay.
// Messages that name a Partition go to it; others are hashed by key.
func NewWriter(brokers []string, topic string) *kafka.Writer {
	return devkafka.NewWriter(brokers, topic)
}

// CreateTopic creates a topic through the Kafka admin API; an existing topic
// with the same name is not an error.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions int, configs map[string]string) error {
	return devkafka.CreateTopic(ctx, brokers, topic, partitions, configs)
}

// WaitForBroker waits until a TCP connection to addr succeeds.
func WaitForBroker(ctx context.Context, addr string) error { return devkafka.WaitForBroker(ctx, addr) }

// EndOffsets returns the end offset (the offset the next record will get) of
// partitions 0..partitions-1 of topic.
func EndOffsets(ctx context.Context, brokers []string, topic string, partitions int) (map[int]int64, error) {
	return devkafka.EndOffsets(ctx, brokers, topic, partitions)
}

// CommittedOffsets returns the group's committed offset for partitions
// 0..partitions-1 of topic; -1 where the group has committed none.
func CommittedOffsets(ctx context.Context, brokers []string, group, topic string, partitions int) (map[int]int64, error) {
	return devkafka.CommittedOffsets(ctx, brokers, group, topic, partitions)
}

// GroupLag is the sum over partitions 0..partitions-1 of topic of the end
// offset minus the group's committed offset (a partition without a commit
// counts from 0).
func GroupLag(ctx context.Context, brokers []string, group, topic string, partitions int) (int64, error) {
	return devkafka.GroupLag(ctx, brokers, group, topic, partitions)
}
