package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

const maxErrorHeader = 1024

// DefaultMaxBytes is Kafka's default max.message.bytes, assumed for
// the dead-letter topic while its own limit can't be read.
const DefaultMaxBytes = 1048588

// recordBatchOverhead is the size of a v2 record batch's header, which Kafka
// counts against max.message.bytes along with the records.
const recordBatchOverhead = 61

// limitRereadInterval is how often a limit that could not be read (an
// assumed one is in force) is asked for again.
const limitRereadInterval = time.Minute

// Writer writes to the dead-letter topic in produce batches that
// fit the topic's max.message.bytes. The limit is read from the cluster on
// first use and again whenever the broker refuses a batch as too large (the
// topic's configuration may have changed); the kafka-go writer is rebuilt
// when it changes, because its BatchBytes can't change under concurrent
// writes.
type Writer struct {
	cfg Config

	mu       sync.RWMutex  // shared by writes; exclusive to read the limit and swap w
	w        *kafka.Writer // nil until the limit is known
	limit    int           // the max.message.bytes w is sized for
	verified bool          // limit was read from the cluster, not assumed
	gen      uint64        // counts limit reads, so that concurrent refusals cause one read
	readAt   time.Time     // the last read attempt
	readErr  string        // the last read failure, logged when it changes
	closed   bool
}

// Config is what a Writer needs.
type Config struct {
	Topic       string // the dead-letter topic
	SourceTopic string // the consumed topic: the label of the dropped-values metric
	Group       string // the consumer group, for the dlq-consumer-group header
	Clients     *broker.Clients
	Log         *slog.Logger
	// Dropped counts dead letters written without their value (by topic).
	Dropped *prometheus.CounterVec
	// Secrets are kept out of the dlq-error header and of the log.
	Secrets []string
}

// NewWriter returns a Writer; it connects on first use.
func NewWriter(cfg Config) *Writer { return &Writer{cfg: cfg} }

// Close closes the kafka-go writer, if one was made.
func (d *Writer) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.w == nil {
		return nil
	}
	return d.w.Close()
}

// batchBytes is the writer's BatchBytes for a max.message.bytes limit. A
// batch kafka-go sends is at most recordBatchOverhead plus the sum of its
// records' recordSize, which is never less than their encoded size, so a
// batch of at most batchBytes fits the limit.
func batchBytes(limit int) int64 { return int64(limit) - recordBatchOverhead }

func (d *Writer) newWriter(limit int) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(d.cfg.Clients.Brokers...),
		Topic:        d.cfg.Topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, // the offset moves on only once the broker has it
		BatchTimeout: time.Millisecond,
		BatchSize:    100,
		BatchBytes:   batchBytes(limit),
		MaxAttempts:  3,
		WriteTimeout: 10 * time.Second,
		ReadTimeout:  10 * time.Second,
		Transport:    d.cfg.Clients.Transport,
	}
}

// dlqState is a writer and the limit it is sized for, valid while the read
// lock the caller got with it is held.
type dlqState struct {
	w        *kafka.Writer
	limit    int
	verified bool // limit was read, not assumed
	gen      uint64
}

// state returns the current writer with the read lock held (the
// caller calls release). It reads the limit first if it is unknown, if an
// assumed limit is due for a re-read, or if stale is the generation the
// caller saw refused and nobody has read the limit since.
func (d *Writer) state(ctx context.Context, stale uint64) (st dlqState, release func(), err error) {
	needsRead := func() bool {
		return d.w == nil || (stale != 0 && d.gen == stale) || (!d.verified && time.Since(d.readAt) >= limitRereadInterval)
	}
	for {
		d.mu.RLock()
		if d.closed {
			d.mu.RUnlock()
			return dlqState{}, nil, errors.New("dead-letter writer closed")
		}
		if !needsRead() {
			return dlqState{w: d.w, limit: d.limit, verified: d.verified, gen: d.gen}, d.mu.RUnlock, nil
		}
		d.mu.RUnlock()
		d.mu.Lock()
		if !d.closed && needsRead() {
			err = d.refreshLimit(ctx)
		}
		d.mu.Unlock()
		if err != nil {
			return dlqState{}, nil, err
		}
		stale = 0
	}
}

// refreshLimit reads the dead-letter topic's max.message.bytes and
// rebuilds the writer if it changed. A failed read keeps the limit in force.
// Before any limit is known, a failure that may pass (the broker unreachable)
// is returned, to be retried; one that won't (no DescribeConfigs permission,
// say) makes the runtime assume Kafka's default, ask again after
// limitRereadInterval, and let the broker judge each record the assumed
// limit would strip (see Write). Called with d.mu held.
func (d *Writer) refreshLimit(ctx context.Context) error {
	d.gen++
	d.readAt = time.Now()
	limit, source, err := d.cfg.Clients.MaxMessageBytes(ctx, d.cfg.Topic)
	if err != nil {
		err = redact.Err(err, d.cfg.Secrets...)
		if d.w == nil && !limitUnreadable(err) {
			return fmt.Errorf("reading the dead-letter topic's max.message.bytes: %w", err)
		}
		limit = d.limit
		if limit == 0 {
			limit = DefaultMaxBytes
		}
		if err.Error() != d.readErr && ctx.Err() == nil {
			d.cfg.Log.Warn("cannot read the dead-letter topic's max.message.bytes; sizing dead-letter batches to an assumed limit",
				"err", err, "deadLetterTopic", d.cfg.Topic, "assumedMaxMessageBytes", limit)
		}
		d.readErr, d.verified = err.Error(), false
	} else {
		d.readErr, d.verified = "", true
	}
	if d.w != nil && limit == d.limit {
		return nil
	}
	if err == nil {
		d.cfg.Log.Info("dead-letter batches sized to the topic's limit", "deadLetterTopic", d.cfg.Topic,
			"maxMessageBytes", limit, "source", source, "previous", d.limit)
	}
	if d.w != nil {
		_ = d.w.Close() // no write is in flight: writes hold the read lock
	}
	d.w, d.limit = d.newWriter(limit), limit
	return nil
}

// limitUnreadable reports a failure to read max.message.bytes that retrying
// won't cure: the broker's refusal (authorization, an unsupported request)
// or an answer without a usable value.
func limitUnreadable(err error) bool {
	var kerr kafka.Error
	return errors.Is(err, broker.ErrNoLimit) || (errors.As(err, &kerr) && !kerr.Temporary())
}

// Message builds the record written to the dead-letter topic.
func (d *Writer) Message(it *record.Item, now time.Time) kafka.Message {
	m := it.Msg
	headers := make([]kafka.Header, 0, len(m.Headers)+10)
	for _, h := range m.Headers {
		if !strings.HasPrefix(h.Key, event.DeadLetterHeaderPrefix) {
			headers = append(headers, h)
		}
	}
	// Redact before truncating: a cut secret would no longer match.
	errText := redact.Text(it.ErrText, d.cfg.Secrets...)
	if len(errText) > maxErrorHeader {
		errText = errText[:maxErrorHeader]
	}
	add := func(k, v string) { headers = append(headers, kafka.Header{Key: k, Value: []byte(v)}) }
	add(event.HeaderDLQReason, string(it.Reason))
	add(event.HeaderDLQError, errText)
	add(event.HeaderDLQOriginalTopic, m.Topic)
	add(event.HeaderDLQOriginalPartition, strconv.Itoa(m.Partition))
	add(event.HeaderDLQOriginalOffset, strconv.FormatInt(m.Offset, 10))
	if !m.Time.IsZero() {
		add(event.HeaderDLQOriginalTimestamp, m.Time.UTC().Format(time.RFC3339Nano))
	}
	add(event.HeaderDLQConsumerGroup, d.cfg.Group)
	if it.Decoded {
		add(event.HeaderDLQEventID, it.Ev.ID.String())
	}
	if it.Attempts > 0 {
		add(event.HeaderDLQAttempts, strconv.Itoa(it.Attempts))
	}
	add(event.HeaderDLQTime, now.UTC().Format(time.RFC3339Nano))
	// Time stays zero (kafka-go stamps the write time): recordSize's bound on
	// the encoded size relies on it.
	return kafka.Message{Key: m.Key, Value: m.Value, Headers: headers}
}

// Write writes the records synchronously with acks=all, in
// batches that fit the dead-letter topic's max.message.bytes. A record that
// alone exceeds the limit is written without its value (fitDeadLetter); it
// is logged and counted once the broker has it. The error it returns is one
// to retry (the broker or the limit read failed): the caller holds the offset
// and calls again with the same records.
func (d *Writer) Write(ctx context.Context, msgs []kafka.Message) error {
	st, release, err := d.state(ctx, 0)
	if err != nil {
		return err
	}
	if _, over := splitOversized(msgs, st.limit); len(over) > 0 && st.verified {
		// Before a value is dropped, make sure the limit wasn't raised since
		// it was read.
		release()
		if st, release, err = d.state(ctx, st.gen); err != nil {
			return err
		}
	}
	var refused []kafka.Message
	if !st.verified {
		// The limit is assumed: let the broker judge the records it would
		// strip, each on its own.
		var whole []kafka.Message
		msgs, whole = splitOversized(msgs, st.limit)
		for _, m := range whole {
			ok, err := d.writeWhole(ctx, m)
			if err != nil {
				release()
				return err
			}
			if !ok {
				refused = append(refused, m)
			}
		}
	}
	r, err := d.writeFitted(ctx, st, msgs)
	release()
	if err != nil {
		return err
	}
	if refused = append(refused, r...); len(refused) == 0 {
		return nil
	}
	// The broker refused batches sized to the limit we know: the topic's
	// limit may have been lowered. Read it again and resend what it refused.
	prev := st.limit
	st, release, err = d.state(ctx, st.gen)
	if err != nil {
		return err
	}
	defer release()
	if st.limit < prev {
		if refused, err = d.writeFitted(ctx, st, refused); err != nil || len(refused) == 0 {
			return err
		}
	}
	// Refused at the limit the cluster reports (or the assumed one): send
	// each record alone, so that only a record the broker refuses by itself
	// loses its value.
	for _, m := range refused {
		if err := d.writeAlone(ctx, st, m); err != nil {
			return err
		}
	}
	return nil
}

// splitOversized separates the records that alone exceed limit.
func splitOversized(msgs []kafka.Message, limit int) (fit, over []kafka.Message) {
	for _, m := range msgs {
		if recordSize(m) > batchBytes(limit) {
			over = append(over, m)
		} else {
			fit = append(fit, m)
		}
	}
	return fit, over
}

// writeWhole writes m whole through a writer sized for it alone; ok is false
// if the broker refuses it as too large.
func (d *Writer) writeWhole(ctx context.Context, m kafka.Message) (ok bool, err error) {
	w := d.newWriter(int(recordSize(m)) + recordBatchOverhead)
	defer w.Close()
	err = w.WriteMessages(ctx, m)
	var werrs kafka.WriteErrors
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &werrs) && len(werrs) == 1 && tooLarge(werrs[0]):
		return false, nil
	}
	return false, localWriteError(err)
}

// writeFitted writes msgs fitted to st.limit and returns those the broker
// refused as too large, or the error of any other failure.
func (d *Writer) writeFitted(ctx context.Context, st dlqState, msgs []kafka.Message) (refused []kafka.Message, err error) {
	send := make([]kafka.Message, len(msgs))
	for i := range msgs {
		if send[i], err = d.fitDeadLetter(msgs[i], st.limit); err != nil {
			return nil, err
		}
	}
	err = st.w.WriteMessages(ctx, send...)
	if err == nil {
		d.reportDropped(send, st.limit)
		return nil, nil
	}
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) || len(werrs) != len(send) {
		return nil, localWriteError(err)
	}
	var failed error
	for i, e := range werrs {
		switch {
		case e == nil:
			d.reportDropped(send[i:i+1], st.limit)
		case tooLarge(e):
			refused = append(refused, msgs[i])
		case failed == nil:
			failed = e
		}
	}
	if failed != nil {
		return nil, fmt.Errorf("writing %d dead letters: %w", len(send), failed)
	}
	return refused, nil
}

// writeAlone writes one record by itself, dropping its value, then its key
// and original headers, as long as the broker refuses it as too large.
func (d *Writer) writeAlone(ctx context.Context, st dlqState, orig kafka.Message) error {
	m, err := d.fitDeadLetter(orig, st.limit)
	if err != nil {
		return err
	}
	for {
		err := st.w.WriteMessages(ctx, m)
		if err == nil {
			d.reportDropped([]kafka.Message{m}, st.limit)
			return nil
		}
		var werrs kafka.WriteErrors
		if !errors.As(err, &werrs) || len(werrs) != 1 {
			return localWriteError(err)
		}
		if !tooLarge(werrs[0]) {
			return fmt.Errorf("writing a dead letter: %w", werrs[0])
		}
		switch {
		case headerValue(m, event.HeaderDLQValueDropped) == "":
			m = withoutValue(orig)
		case headerValue(m, event.HeaderDLQKeyAndHeadersDropped) == "":
			m = withoutKeyAndHeaders(m)
		default:
			return fmt.Errorf("the dead-letter topic %s refuses a dead letter of %d bytes without key, value or original headers as too large (max.message.bytes read as %d): raise its max.message.bytes",
				d.cfg.Topic, recordSize(m), st.limit)
		}
	}
}

// localWriteError explains an error kafka-go returned without sending, and
// wraps any other; fitDeadLetter keeps every record within BatchBytes, so a
// MessageTooLargeError would be a bug here, not the broker's answer.
func localWriteError(err error) error {
	var local kafka.MessageTooLargeError
	if errors.As(err, &local) {
		return fmt.Errorf("writing dead letters: kafka-go refused a %d-byte record before sending it (larger than the writer's BatchBytes): %w",
			recordSize(local.Message), err)
	}
	return fmt.Errorf("writing dead letters: %w", err)
}

// tooLarge reports the broker refusing a batch for its size.
func tooLarge(err error) bool {
	return errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.RecordListTooLarge)
}
