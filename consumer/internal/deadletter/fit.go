package deadletter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/segmentio/kafka-go"
)

// fitDeadLetter returns m, or m without its value if m alone exceeds the
// limit, or also without its key and original headers if that is not enough;
// an error if even that does not fit. A record the source topic accepted may
// exceed the dead-letter topic's limit (the source topic's may be larger);
// it can't go to the dead-letter topic whole, and its original stays
// readable from the source topic (the dlq-original-* headers say where) until
// the source topic's retention removes it.
func (d *Writer) fitDeadLetter(m kafka.Message, limit int) (kafka.Message, error) {
	maxSize := batchBytes(limit)
	if recordSize(m) <= maxSize {
		return m, nil
	}
	m = withoutValue(m)
	if recordSize(m) <= maxSize {
		return m, nil
	}
	m = withoutKeyAndHeaders(m)
	if recordSize(m) <= maxSize {
		return m, nil
	}
	return m, fmt.Errorf("a dead letter needs %d bytes without key, value or original headers, more than the dead-letter topic %s's max.message.bytes %d allows: raise it",
		recordSize(m)+recordBatchOverhead, d.cfg.Topic, limit)
}

// withoutValue returns m without its value, marked with the headers
// dlq-value-dropped and dlq-value-size.
func withoutValue(m kafka.Message) kafka.Message {
	size := len(m.Value)
	m.Value = nil
	m.Headers = append(slices.Clip(m.Headers),
		kafka.Header{Key: event.HeaderDLQValueDropped, Value: []byte("true")},
		kafka.Header{Key: event.HeaderDLQValueSize, Value: []byte(strconv.Itoa(size))})
	return m
}

// withoutKeyAndHeaders returns m without its key and with only its dlq-
// headers, marked with dlq-key-and-headers-dropped.
func withoutKeyAndHeaders(m kafka.Message) kafka.Message {
	m.Key = nil
	var hs []kafka.Header
	for _, h := range m.Headers {
		if strings.HasPrefix(h.Key, event.DeadLetterHeaderPrefix) {
			hs = append(hs, h)
		}
	}
	m.Headers = append(hs, kafka.Header{Key: event.HeaderDLQKeyAndHeadersDropped, Value: []byte("true")})
	return m
}

// reportDropped logs and counts the dead letters among msgs, which the broker
// has acknowledged, that were written without their value.
func (d *Writer) reportDropped(msgs []kafka.Message, limit int) {
	for i := range msgs {
		m := &msgs[i]
		if headerValue(*m, event.HeaderDLQValueDropped) == "" {
			continue
		}
		d.cfg.Dropped.WithLabelValues(d.cfg.SourceTopic).Inc()
		attrs := []any{
			"deadLetterTopic", d.cfg.Topic,
			"partition", headerValue(*m, event.HeaderDLQOriginalPartition),
			"offset", headerValue(*m, event.HeaderDLQOriginalOffset),
			"reason", headerValue(*m, event.HeaderDLQReason),
			"valueBytes", headerValue(*m, event.HeaderDLQValueSize),
			"maxMessageBytes", limit,
		}
		if id := headerValue(*m, event.HeaderDLQEventID); id != "" {
			attrs = append(attrs, "eventId", id)
		}
		if headerValue(*m, event.HeaderDLQKeyAndHeadersDropped) != "" {
			attrs = append(attrs, "keyAndHeadersDropped", true)
		}
		d.cfg.Log.Error("dead letter written without its value: the record alone exceeds the dead-letter topic's max.message.bytes; the original stays in the source topic until its retention",
			attrs...)
	}
}

// headerValue returns the last value of a header of m, or "".
func headerValue(m kafka.Message, key string) string {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == key {
			return string(m.Headers[i].Value)
		}
	}
	return ""
}

// recordSize is a record's size as kafka-go's writer counts it against
// BatchBytes (Message.totalSize in kafka-go v0.4.51: a v1 message's fixed
// fields, 4-byte key and value lengths, varint-framed headers). A record's
// v2 encoding is no larger as long as its Time is zero, which dead letters'
// is (their timestamp delta is then 0, one byte), and the batch has fewer
// than 8192 records (offset deltas of at most two bytes): 9 bytes of
// framing and two varint lengths of at most 5 bytes against 14 and two 4-byte
// lengths. TestRecordSizeMatchesKafkaGo checks it against kafka-go.
func recordSize(m kafka.Message) int64 {
	n := 4 + 1 + 1 + 8 + 4 + len(m.Key) + 4 + len(m.Value) + varintLen(len(m.Headers))
	for _, h := range m.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return int64(n)
}

// varintLen is the size of n as a zig-zag varint.
func varintLen(n int) int {
	u := uint64(n) << 1 //nolint:gosec // G115: n is a length, >= 0
	size := 1
	for u >= 0x80 {
		u >>= 7
		size++
	}
	return size
}
