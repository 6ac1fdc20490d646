package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASL mechanisms.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// Config is what the broker connections of one consumer share.
type Config struct {
	Brokers  []string
	ClientID string
	TLS      *tls.Config
	// SASL: Mechanism "" (none), SASLPlain, SASLScramSHA256 or SASLScramSHA512.
	Mechanism, Username, Password string
}

func saslMechanism(c Config) (sasl.Mechanism, error) {
	switch c.Mechanism {
	case "":
		return nil, nil
	case SASLPlain:
		return plain.Mechanism{Username: c.Username, Password: c.Password}, nil
	case SASLScramSHA256:
		return scram.Mechanism(scram.SHA256, c.Username, c.Password)
	case SASLScramSHA512:
		return scram.Mechanism(scram.SHA512, c.Username, c.Password)
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q", c.Mechanism)
}

// Clients holds what every Kafka connection of one consumer shares.
type Clients struct {
	Brokers   []string
	Dialer    *kafka.Dialer
	Transport *kafka.Transport
}

// NewClients returns the dialer and transport of cfg.
func NewClients(cfg Config) (*Clients, error) {
	mech, err := saslMechanism(cfg)
	if err != nil {
		return nil, err
	}
	return &Clients{
		Brokers: cfg.Brokers,
		Dialer: &kafka.Dialer{
			ClientID:      cfg.ClientID,
			Timeout:       10 * time.Second,
			DualStack:     true,
			TLS:           cfg.TLS,
			SASLMechanism: mech,
		},
		Transport: &kafka.Transport{
			ClientID:    cfg.ClientID,
			DialTimeout: 10 * time.Second,
			TLS:         cfg.TLS,
			SASL:        mech,
			MetadataTTL: 30 * time.Second,
		},
	}, nil
}

// Logger adapts kafka-go's printf logger to slog at Level (debug or below);
// its messages are chatty and contain nothing secret.
type Logger struct {
	Log   *slog.Logger
	Level slog.Level
}

// Printf implements kafka.Logger.
func (l Logger) Printf(format string, args ...any) {
	if !l.Log.Enabled(context.Background(), l.Level) {
		return
	}
	l.Log.Log(context.Background(), l.Level, fmt.Sprintf(format, args...), "component", "kafka-go")
}

// Loggers returns kafka-go's Logger and ErrorLogger for log: the chatty
// one below debug, errors at debug (the runtime reports what matters).
func Loggers(log *slog.Logger) (info, errors Logger) {
	return Logger{log, slog.LevelDebug - 4}, Logger{log, slog.LevelDebug}
}

// client is a kafka.Client of the brokers.
func (cl *Clients) client() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(cl.Brokers...), Transport: cl.Transport, Timeout: 10 * time.Second}
}

// ErrTopicMissing is returned by CheckTopics for a topic the broker does not know.
var ErrTopicMissing = errors.New("topic does not exist")

// CheckTopics asks a broker for the topics' metadata. It does not go through
// the Transport, which answers metadata requests from a cache refreshed every
// MetadataTTL: a topic created while the consumer waits for it would stay
// missing for up to that long.
func (cl *Clients) CheckTopics(ctx context.Context, topics ...string) error {
	conn, err := cl.dialAny(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, t := range topics {
		parts, err := conn.ReadPartitions(t)
		switch {
		case errors.Is(err, kafka.UnknownTopicOrPartition) || err == nil && len(parts) == 0:
			return fmt.Errorf("%w: %s", ErrTopicMissing, t)
		case err != nil:
			return fmt.Errorf("reading topic metadata: %w", err)
		}
	}
	return nil
}

// PartitionCount is how many partitions topic has, asked of a broker
// directly (not from the Transport's cached metadata).
func (cl *Clients) PartitionCount(ctx context.Context, topic string) (int, error) {
	conn, err := cl.dialAny(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		return 0, fmt.Errorf("reading topic metadata: %w", err)
	}
	return len(parts), nil
}

// dialAny connects to the first broker that answers, with ctx's deadline
// (10 s when it has none) on the connection.
func (cl *Clients) dialAny(ctx context.Context) (*kafka.Conn, error) {
	var conn *kafka.Conn
	var err error
	for _, b := range cl.Brokers {
		if conn, err = cl.Dialer.DialContext(ctx, "tcp", b); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading topic metadata: %w", err)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(10 * time.Second)
	}
	_ = conn.SetDeadline(dl)
	return conn, nil
}

// ErrNoLimit is a cluster's answer without a usable record size limit.
var ErrNoLimit = errors.New("no usable record size limit")

// MaxMessageBytes reads a topic's max.message.bytes, the largest record
// batch its brokers accept, falling back to the controller's
// message.max.bytes when the topic's configuration doesn't list it. source
// says which one answered.
func (cl *Clients) MaxMessageBytes(ctx context.Context, topic string) (limit int, source string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client := cl.client()
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
		err = fmt.Errorf("%w: neither topic %s's max.message.bytes nor broker %s's message.max.bytes is in the cluster's answer", ErrNoLimit, topic, broker)
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
				return 0, false, fmt.Errorf("reading %s of %s: %w: %q is not a positive integer", config, name, ErrNoLimit, e.ConfigValue)
			}
			return n, true, nil
		}
	}
	return 0, false, nil
}

// LogBounds returns a partition's log start and end offsets.
func (cl *Clients) LogBounds(ctx context.Context, topic string, partition int) (first, end int64, err error) {
	resp, err := cl.client().ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		topic: {kafka.FirstOffsetOf(partition), kafka.LastOffsetOf(partition)},
	}})
	if err != nil {
		return 0, 0, fmt.Errorf("listing offsets of partition %d: %w", partition, err)
	}
	for _, p := range resp.Topics[topic] {
		if p.Partition != partition {
			continue
		}
		if p.Error != nil {
			return 0, 0, fmt.Errorf("listing offsets of partition %d: %w", partition, p.Error)
		}
		return p.FirstOffset, p.LastOffset, nil
	}
	return 0, 0, fmt.Errorf("listing offsets of partition %d: no answer for it", partition)
}

// Partitions lists a topic's partition numbers, in order.
func (cl *Clients) Partitions(ctx context.Context, topic string) ([]int, error) {
	resp, err := cl.client().Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("reading topic metadata: %w", err)
	}
	for _, t := range resp.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("reading metadata of topic %s: %w", topic, t.Error)
		}
		parts := make([]int, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
		slices.Sort(parts)
		if len(parts) > 0 {
			return parts, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrTopicMissing, topic)
}
