package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// The producer. segmentio/kafka-go's Writer has no idempotent producer: it
// retries a whole batch, and with more than one request in flight per
// partition a retry can land behind a later batch. The relay therefore
// makes exactly one call at a time (synchronous WriteMessages), each cut
// small enough (chunks) that kafka-go turns it into one record batch per
// partition (no partition's share is split across batches), with
// RequiredAcks all and MaxAttempts 1: a failed call is retried by the relay,
// whole, after a backoff, and only an acknowledged call moves the cursor.
// A record batch is appended atomically, so a retry after a partial
// failure repeats whole batches: duplicates with the same eventId, never a
// key's records out of their first order. docs/design.md says why not
// franz-go's idempotent producer.

func newWriter(cfg Config) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Balancer:     &kafka.Murmur2Balancer{}, // the Java client's partitioner: the same key lands where other producers put it
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  1,
		// A call (chunks) has at most BatchSize records, so no partition's
		// share of it is split by count. kafka-go allocates a batch's slice
		// of messages at this capacity for every partition of every call:
		// four times the page (it once was) cleared 1.3 MB a partition.
		BatchSize:              cfg.BatchSize,
		BatchBytes:             int64(cfg.MaxMessageBytes),
		BatchTimeout:           time.Millisecond, // a call's batches close when it has handed them all over
		WriteTimeout:           cfg.PublishTimeout,
		ReadTimeout:            cfg.PublishTimeout,
		AllowAutoTopicCreation: false,
		Transport:              cfg.Transport,
	}
}

// message is r as a Kafka record: key, value, and the headers eventId and
// the CloudEvents Kafka binding's binary mode (ce_specversion 1.0, ce_id the
// eventId, ce_source source, ce_type the topic, ce_time the row's
// created_at), so that this project's consumer (envelope mode cloudevents or
// auto) and any CloudEvents reader take the outbox's eventId as the event's
// id; then the user's headers (traceparent among them) in name order. A
// user's ce_type, ce_source or ce_time replaces the default; eventId, ce_id
// and ce_specversion are the relay's own.
func (r row) message(source string) kafka.Message {
	id := []byte(r.id.String())
	h := make([]kafka.Header, 3, 6+len(r.headers))
	h[0], h[1], h[2] = kafka.Header{Key: "eventId", Value: id}, kafka.Header{Key: "ce_specversion", Value: ceSpecVersion}, kafka.Header{Key: "ce_id", Value: id}
	rest := h[3:]
	var own [3]bool // the user set ce_source, ce_time, ce_type
	for k, v := range r.headers {
		switch k {
		case "eventId", "ce_id", "ce_specversion":
			continue
		case "ce_source":
			own[0] = true
		case "ce_time":
			own[1] = true
		case "ce_type":
			own[2] = true
		}
		rest = append(rest, kafka.Header{Key: k, Value: []byte(v)})
	}
	if !own[0] {
		rest = append(rest, kafka.Header{Key: "ce_source", Value: []byte(source)})
	}
	if !own[1] {
		rest = append(rest, kafka.Header{Key: "ce_time", Value: r.createdAt.UTC().AppendFormat(nil, time.RFC3339Nano)})
	}
	if !own[2] {
		rest = append(rest, kafka.Header{Key: "ce_type", Value: []byte(r.topic)})
	}
	slices.SortFunc(rest, func(a, b kafka.Header) int { return strings.Compare(a.Key, b.Key) })
	return kafka.Message{Topic: r.topic, Key: r.key, Value: r.payload, Headers: h[:3+len(rest)]}
}

var ceSpecVersion = []byte("1.0")

// PublishError is a failed publish: the batch is not acknowledged, the
// cursor stays, and the relay tries the same rows again after a backoff.
type PublishError struct {
	Reason string // ReasonMessageTooLarge, ReasonUnknownTopic or ReasonBroker
	Topic  string // the topic of the first failed record, if known
	Err    error
}

func (e *PublishError) Error() string {
	what := map[string]string{
		ReasonMessageTooLarge: "a record is larger than the broker (or the relay's max message bytes) accepts; raise the topic's max.message.bytes or the relay's limit: the relay waits and will not skip it",
		ReasonUnknownTopic:    "the topic does not exist; create it: the relay waits and will not skip its rows",
		ReasonBroker:          "the broker did not acknowledge the batch",
	}[e.Reason]
	t := ""
	if e.Topic != "" {
		t = " to topic " + e.Topic
	}
	return fmt.Sprintf("publishing outbox rows%s: %s: %v", t, what, e.Err)
}

func (e *PublishError) Unwrap() error { return e.Err }

// publish writes rows, in order, in calls small enough that kafka-go makes
// one record batch of each partition's share (chunks), each call only after
// the one before was acknowledged, all within one PublishTimeout (the
// takeover delay counts on it), and classifies a failure. A page with the
// rows read ahead of it can exceed one batch; handed over in one call,
// kafka-go split a partition's share into several batches sent one after
// another, and a failure of the first did not stop the second: a key's
// later event could be appended before its earlier one.
func (r *Relay) publish(ctx context.Context, rows []row) error {
	msgs := make([]kafka.Message, len(rows))
	for i, o := range rows {
		msgs[i] = o.message(r.source)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	for _, c := range chunks(msgs, r.writer.BatchSize, r.writer.BatchBytes) {
		if err := r.writeSplitting(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// writeSplitting writes msgs in one call; if the broker (or kafka-go)
// refuses it as too large, it writes the first half and then, once that is
// acknowledged, the second, halving again as needed down to single
// records: records that each fit a topic's max.message.bytes (lower than
// the relay's MaxMessageBytes) can exceed it together. Only a record too
// large alone fails (ReasonMessageTooLarge) and holds the stream. A refused
// call may have been appended on other partitions; their records go again
// with the halves, after their first copies: duplicates, never a key's
// first copies out of order.
func (r *Relay) writeSplitting(ctx context.Context, msgs []kafka.Message) error {
	err := r.write(ctx, msgs)
	var pe *PublishError
	if err == nil || len(msgs) < 2 || !errors.As(err, &pe) || pe.Reason != ReasonMessageTooLarge {
		return err
	}
	r.log.Debug("outbox relay: a call was too large for the broker; publishing it in halves", "records", len(msgs), "topic", pe.Topic)
	h := len(msgs) / 2
	if err := r.writeSplitting(ctx, msgs[:h]); err != nil {
		return err
	}
	return r.writeSplitting(ctx, msgs[h:])
}

// chunks cuts msgs, in order, into runs of at most maxCount messages and
// at most maxBytes bytes (by messageSize, which overestimates kafka-go's
// own reckoning); a message larger than maxBytes on its own is a run of
// its own, which the broker refuses or takes whole.
func chunks(msgs []kafka.Message, maxCount int, maxBytes int64) [][]kafka.Message {
	var out [][]kafka.Message
	start, bytes := 0, int64(0)
	for i, m := range msgs {
		n := messageSize(m)
		if i > start && (i-start >= maxCount || bytes+n > maxBytes) {
			out = append(out, msgs[start:i])
			start, bytes = i, 0
		}
		bytes += n
	}
	if start < len(msgs) {
		out = append(out, msgs[start:])
	}
	return out
}

// messageSize is m's size in a record batch, over-estimated: key, value,
// headers, and 64 bytes of framing.
func messageSize(m kafka.Message) int64 {
	n := len(m.Key) + len(m.Value) + 64
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return int64(n)
}

// write is one WriteMessages call and its failure classified.
func (r *Relay) write(ctx context.Context, msgs []kafka.Message) error {
	err := r.writer.WriteMessages(ctx, msgs...)
	if err == nil {
		return nil
	}
	pe := &PublishError{Reason: ReasonBroker, Err: err}
	first := func(e error) {
		switch {
		case isTooLarge(e):
			pe.Reason = ReasonMessageTooLarge
		case errors.Is(e, kafka.UnknownTopicOrPartition) || strings.Contains(e.Error(), "Unknown Topic Or Partition"):
			pe.Reason = ReasonUnknownTopic
		}
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		for i, e := range werrs {
			if e != nil {
				first(e)
				pe.Topic = msgs[i].Topic
				break
			}
		}
	} else {
		first(err)
		var mtl kafka.MessageTooLargeError
		if errors.As(err, &mtl) {
			pe.Topic = mtl.Message.Topic
		}
	}
	return pe
}

func isTooLarge(err error) bool {
	var mtl kafka.MessageTooLargeError
	return errors.As(err, &mtl) || errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.RecordListTooLarge)
}
