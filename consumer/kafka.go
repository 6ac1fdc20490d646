package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
