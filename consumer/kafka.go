package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

func saslMechanism(s SASL) (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case SASLPlain:
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case SASLScramSHA256:
		return scram.Mechanism(scram.SHA256, s.Username, s.Password)
	case SASLScramSHA512:
		return scram.Mechanism(scram.SHA512, s.Username, s.Password)
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q", s.Mechanism)
}

// kafkaClients holds what every Kafka connection of one Consumer shares.
type kafkaClients struct {
	dialer    *kafka.Dialer
	transport *kafka.Transport
}

func newKafkaClients(cfg Config) (*kafkaClients, error) {
	mech, err := saslMechanism(cfg.SASL)
	if err != nil {
		return nil, err
	}
	return &kafkaClients{
		dialer: &kafka.Dialer{
			ClientID:      cfg.ClientID,
			Timeout:       10 * time.Second,
			DualStack:     true,
			TLS:           cfg.TLS,
			SASLMechanism: mech,
		},
		transport: &kafka.Transport{
			ClientID:    cfg.ClientID,
			DialTimeout: 10 * time.Second,
			TLS:         cfg.TLS,
			SASL:        mech,
			MetadataTTL: 30 * time.Second,
		},
	}, nil
}

// kafkaLogger adapts kafka-go's printf logger to slog at debug level; its
// messages are chatty and contain nothing secret.
type kafkaLogger struct {
	log   *slog.Logger
	level slog.Level
}

func (l kafkaLogger) Printf(format string, args ...any) {
	if !l.log.Enabled(context.Background(), l.level) {
		return
	}
	l.log.Log(context.Background(), l.level, fmt.Sprintf(format, args...), "component", "kafka-go")
}

// errTopicMissing is returned by checkTopics for a topic the broker does not know.
var errTopicMissing = errors.New("topic does not exist")

// checkTopics asks the cluster for the topics' metadata.
func (c *Consumer) checkTopics(ctx context.Context, topics ...string) error {
	client := &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...), Transport: c.kafka.transport, Timeout: 10 * time.Second}
	resp, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return fmt.Errorf("reading topic metadata: %w", err)
	}
	found := map[string]bool{}
	for _, t := range resp.Topics {
		if t.Error == nil && len(t.Partitions) > 0 {
			found[t.Name] = true
		}
	}
	for _, t := range topics {
		if !found[t] {
			return fmt.Errorf("%w: %s", errTopicMissing, t)
		}
	}
	return nil
}

// errNoLimit is a cluster's answer without a usable record size limit.
var errNoLimit = errors.New("no usable record size limit")

// readMaxMessageBytes reads a topic's max.message.bytes, the largest record
// batch its brokers accept, falling back to the controller's
// message.max.bytes when the topic's configuration doesn't list it. source
// says which one answered.
func (c *Consumer) readMaxMessageBytes(ctx context.Context, topic string) (limit int, source string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...), Transport: c.kafka.transport, Timeout: 10 * time.Second}
	limit, found, err := describeIntConfig(ctx, client, kafka.ResourceTypeTopic, topic, "max.message.bytes")
	if err != nil || found {
		return limit, "topic max.message.bytes", err
	}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, "", fmt.Errorf("reading cluster metadata: %w", err)
	}
	broker := strconv.Itoa(md.Controller.ID)
	limit, found, err = describeIntConfig(ctx, client, kafka.ResourceTypeBroker, broker, "message.max.bytes")
	if err == nil && !found {
		err = fmt.Errorf("%w: neither topic %s's max.message.bytes nor broker %s's message.max.bytes is in the cluster's answer", errNoLimit, topic, broker)
	}
	return limit, "broker message.max.bytes", err
}

// describeIntConfig reads one positive integer configuration of a resource;
// found is false if the answer doesn't list it.
func describeIntConfig(ctx context.Context, client *kafka.Client, typ kafka.ResourceType, name, config string) (n int, found bool, err error) {
	resp, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: typ, ResourceName: name, ConfigNames: []string{config},
	}}})
	if err != nil {
		return 0, false, fmt.Errorf("reading %s of %s: %w", config, name, err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return 0, false, fmt.Errorf("reading %s of %s: %w", config, name, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != config {
				continue
			}
			n, err := strconv.Atoi(e.ConfigValue)
			if err != nil || n <= 0 {
				return 0, false, fmt.Errorf("reading %s of %s: %w: %q is not a positive integer", config, name, errNoLimit, e.ConfigValue)
			}
			return n, true, nil
		}
	}
	return 0, false, nil
}
