// Package devkafka runs an in-process Kafka-protocol broker (franz-go's
// kfake) and talks to it with segmentio/kafka-go, for tests and for the
// development broker cmd/devbroker. It does not import testing, so a command
// can use it without linking the test framework; consumer/consumertest wraps
// it with helpers that fail a test.
package devkafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Broker is an in-process Kafka-protocol cluster (franz-go's kfake) that
// segmentio/kafka-go clients talk to over real TCP on loopback.
type Broker struct {
	cluster *kfake.Cluster
}

// Options returns the cluster options Start applies first: one broker, group
// session timeouts down to 100ms so tests can rebalance quickly. Options
// passed to Start are applied after these (kfake.Ports overrides the broker
// count).
func Options() []kfake.Opt {
	return []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}
}

// Start starts a cluster; Close stops it.
func Start(opts ...kfake.Opt) (*Broker, error) {
	c, err := kfake.NewCluster(append(Options(), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("starting kfake cluster: %w", err)
	}
	return &Broker{cluster: c}, nil
}

// Cluster exposes the underlying kfake cluster, for fault injection.
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// Brokers returns the bootstrap addresses (host:port).
func (b *Broker) Brokers() []string { return b.cluster.ListenAddrs() }

// Close stops the cluster.
func (b *Broker) Close() { b.cluster.Close() }

// CreateTopic creates a topic with the given partition count, optionally with
// topic configs such as retention.ms.
func (b *Broker) CreateTopic(ctx context.Context, topic string, partitions int, configs map[string]string) error {
	return CreateTopic(ctx, b.Brokers(), topic, partitions, configs)
}

// Writer returns a kafka-go writer tuned for tests: synchronous, acks=all,
// no batching delay (the default 1s BatchTimeout makes synchronous writes crawl).
func (b *Broker) Writer(topic string) *kafka.Writer { return NewWriter(b.Brokers(), topic) }

// NewWriter returns a synchronous acks=all kafka-go writer without batching delay.
// Messages that name a Partition go to it; others are hashed by key.
func NewWriter(brokers []string, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &explicitOrHash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
		BatchSize:    1000,
		MaxAttempts:  10,
	}
}

// explicitOrHash sends a message to its Partition field when set (> 0, or 0
// with no key), else hashes the key like Kafka's default partitioner.
type explicitOrHash struct{ hash kafka.Hash }

func (b *explicitOrHash) Balance(msg kafka.Message, partitions ...int) int {
	if msg.Key == nil {
		for _, p := range partitions {
			if p == msg.Partition {
				return p
			}
		}
	}
	return b.hash.Balance(msg, partitions...)
}

// CreateTopic creates a topic through the Kafka admin API; an existing topic
// with the same name is not an error.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions int, configs map[string]string) error {
	if len(brokers) == 0 {
		return errors.New("creating topic: no brokers")
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second}
	tc := kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}
	for k, v := range configs {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	resp, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{tc}})
	if err != nil {
		return fmt.Errorf("creating topic %q: %w", topic, err)
	}
	if err := resp.Errors[topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %q: %w", topic, err)
	}
	return nil
}

// WaitForBroker waits until a TCP connection to addr succeeds.
func WaitForBroker(ctx context.Context, addr string) error {
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for broker %s: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// EndOffsets returns the end offset (the offset the next record will get) of
// partitions 0..partitions-1 of topic.
func EndOffsets(ctx context.Context, brokers []string, topic string, partitions int) (map[int]int64, error) {
	return lastOffsets(ctx, brokers, topic, partitions, kafka.ReadUncommitted, "end")
}

// StableOffsets returns the last stable offset (LSO) of partitions
// 0..partitions-1 of topic: the end offset a read_committed consumer can
// read up to. It is below the end offset while a transaction that wrote to
// the partition is open; one that stays below tells of a transaction that
// never ended (a read_committed group then waits there for good).
func StableOffsets(ctx context.Context, brokers []string, topic string, partitions int) (map[int]int64, error) {
	return lastOffsets(ctx, brokers, topic, partitions, kafka.ReadCommitted, "stable")
}

// lastOffsets lists the last offset of partitions 0..partitions-1 of topic
// at isolation level iso (what names it in errors).
func lastOffsets(ctx context.Context, brokers []string, topic string, partitions int, iso kafka.IsolationLevel, what string) (map[int]int64, error) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	req := make([]kafka.OffsetRequest, partitions)
	for i := range req {
		req[i] = kafka.LastOffsetOf(i)
	}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}, IsolationLevel: iso})
	if err != nil {
		return nil, fmt.Errorf("listing %s offsets of %s: %w", what, topic, err)
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("listing %s offsets of %s/%d: %w", what, topic, p.Partition, p.Error)
		}
		out[p.Partition] = p.LastOffset
	}
	return out, nil
}

// Offsets describes partitions 0..partitions-1 of topic for a group whose
// lag does not go away: per partition, the end offset, the last stable
// offset and the group's committed offset ("p0 end=... stable=...
// committed=..."), marking a stable offset below the end.
func Offsets(ctx context.Context, brokers []string, group, topic string, partitions int) string {
	ends, err := EndOffsets(ctx, brokers, topic, partitions)
	if err != nil {
		return err.Error()
	}
	stable, err := StableOffsets(ctx, brokers, topic, partitions)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	committed, err := CommittedOffsets(ctx, brokers, group, topic, partitions)
	if err != nil {
		fmt.Fprintf(&b, "(%v)\n", err)
	}
	for p := range partitions {
		c := "?"
		if v, ok := committed[p]; ok {
			c = strconv.FormatInt(v, 10)
		}
		fmt.Fprintf(&b, "%s[%d] end=%d stable=%d committed=%s", topic, p, ends[p], stable[p], c)
		if stable[p] < ends[p] {
			b.WriteString(" (a transaction open at the stable offset)")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// CommittedOffsets returns the group's committed offset for partitions
// 0..partitions-1 of topic; -1 where the group has committed none.
func CommittedOffsets(ctx context.Context, brokers []string, group, topic string, partitions int) (map[int]int64, error) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	parts := make([]int, partitions)
	for i := range parts {
		parts[i] = i
	}
	resp, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("fetching offsets of group %s: %w", group, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("fetching offsets of group %s: %w", group, resp.Error)
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("fetching offsets of group %s for %s/%d: %w", group, topic, p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

// GroupLag is the sum over partitions 0..partitions-1 of topic of the end
// offset minus the group's committed offset (a partition without a commit
// counts from 0).
func GroupLag(ctx context.Context, brokers []string, group, topic string, partitions int) (int64, error) {
	ends, err := EndOffsets(ctx, brokers, topic, partitions)
	if err != nil {
		return 0, err
	}
	committed, err := CommittedOffsets(ctx, brokers, group, topic, partitions)
	if err != nil {
		return 0, err
	}
	var lag int64
	for p, end := range ends {
		if d := end - max(committed[p], 0); d > 0 {
			lag += d
		}
	}
	return lag, nil
}
