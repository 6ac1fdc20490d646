package consumer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// Dead-letter headers, added to the original record's headers. Headers of the
// original that start with DeadLetterHeaderPrefix are dropped first, so an
// event replayed from the dead-letter topic and failing again carries only
// its latest failure.
const (
	DeadLetterHeaderPrefix     = "dlq-"
	HeaderDLQReason            = "dlq-reason"             // a Reason, e.g. "not_json"
	HeaderDLQError             = "dlq-error"              // the error text, at most 1 KiB
	HeaderDLQOriginalTopic     = "dlq-original-topic"     // topic of the original record
	HeaderDLQOriginalPartition = "dlq-original-partition" // decimal
	HeaderDLQOriginalOffset    = "dlq-original-offset"    // decimal
	HeaderDLQOriginalTimestamp = "dlq-original-timestamp" // RFC 3339, the original record's timestamp
	HeaderDLQConsumerGroup     = "dlq-consumer-group"     // the group that gave up on it
	HeaderDLQEventID           = "dlq-event-id"           // the event id, when it was decoded
	HeaderDLQAttempts          = "dlq-attempts"           // handler attempts (handler_failed only)
	HeaderDLQTime              = "dlq-time"               // RFC 3339, when it was dead-lettered
	HeaderDLQValueDropped      = "dlq-value-dropped"      // "true" if the broker refused the value as too large
)

const maxErrorHeader = 1024

func newDeadLetterWriter(cfg Config, kc *kafkaClients) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Topic:        cfg.DeadLetterTopic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, // the offset moves on only once the broker has it
		BatchTimeout: time.Millisecond,
		BatchSize:    100,
		BatchBytes:   int64(max(cfg.Envelope.MaxBytes, 0)) + 2<<20,
		MaxAttempts:  3,
		WriteTimeout: 10 * time.Second,
		ReadTimeout:  10 * time.Second,
		Transport:    kc.transport,
	}
}

// deadLetterMessage builds the record written to the dead-letter topic.
func (c *Consumer) deadLetterMessage(it *item, now time.Time) kafka.Message {
	m := it.msg
	headers := make([]kafka.Header, 0, len(m.Headers)+10)
	for _, h := range m.Headers {
		if !strings.HasPrefix(h.Key, DeadLetterHeaderPrefix) {
			headers = append(headers, h)
		}
	}
	errText := it.errText
	if len(errText) > maxErrorHeader {
		errText = errText[:maxErrorHeader]
	}
	add := func(k, v string) { headers = append(headers, kafka.Header{Key: k, Value: []byte(v)}) }
	add(HeaderDLQReason, string(it.reason))
	add(HeaderDLQError, redactText(errText, c.secrets...))
	add(HeaderDLQOriginalTopic, m.Topic)
	add(HeaderDLQOriginalPartition, strconv.Itoa(m.Partition))
	add(HeaderDLQOriginalOffset, strconv.FormatInt(m.Offset, 10))
	if !m.Time.IsZero() {
		add(HeaderDLQOriginalTimestamp, m.Time.UTC().Format(time.RFC3339Nano))
	}
	add(HeaderDLQConsumerGroup, c.cfg.Group)
	if it.decoded {
		add(HeaderDLQEventID, it.ev.ID.String())
	}
	if it.attempts > 0 {
		add(HeaderDLQAttempts, strconv.Itoa(it.attempts))
	}
	add(HeaderDLQTime, now.UTC().Format(time.RFC3339Nano))
	return kafka.Message{Key: m.Key, Value: m.Value, Headers: headers}
}

// writeDeadLetters writes the records synchronously with acks=all. A record
// the broker refuses as too large is written again without its value.
func (c *Consumer) writeDeadLetters(ctx context.Context, msgs []kafka.Message) error {
	err := c.dlq.WriteMessages(ctx, msgs...)
	if err == nil {
		return nil
	}
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) || len(werrs) != len(msgs) {
		return err
	}
	var retry []kafka.Message
	for i, e := range werrs {
		if e == nil {
			continue
		}
		m := msgs[i]
		var tooLarge kafka.MessageTooLargeError
		if errors.Is(e, kafka.MessageSizeTooLarge) || errors.As(e, &tooLarge) {
			m.Value = nil
			m.Headers = append(m.Headers, kafka.Header{Key: HeaderDLQValueDropped, Value: []byte("true")})
		}
		retry = append(retry, m)
	}
	return c.dlq.WriteMessages(ctx, retry...)
}
