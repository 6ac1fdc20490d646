package partition

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envelope"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/internal/deadletter"
	"github.com/idempotency-dev/operator/consumer/internal/membudget"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"
)

// Deps is what the partitions of a consumer (or of a dead-letter replay)
// share.
type Deps struct {
	// Topic is the topic the partitions are read from: the consumed topic,
	// or the dead-letter topic for a replay.
	Topic           string
	Group           string
	StartOffset     string // the StartOffset policy's name, for the log
	DeadLetterTopic string
	Isolation       kafka.IsolationLevel
	BatchSize       int
	BatchWait       time.Duration
	RetryBackoffMax time.Duration
	Envelope        envelope.Options
	Policies        map[event.Reason]event.Policy
	// DisableDedup skips the dedup insert and the positions (benchmark
	// baseline only).
	DisableDedup bool
	// PositionsKey is the topic column of the partitions' rows in the
	// positions table; empty: Topic. A replay keeps its progress under a
	// key of its own that no Kafka topic can have, never the live group's.
	PositionsKey string
	// Replay is set when the partitions replay dead letters (nil for the
	// live consumer): see internal/replay.
	Replay Replay
	// FetchMaxWait is how long a fetch at the end of the log waits for new
	// records (0: 500ms). Closing a reader waits for its fetch in flight,
	// so a replay, which stops at an end offset it knows in advance, sets
	// it short: else each partition's worker would end up to 500ms after
	// its last record.
	FetchMaxWait time.Duration

	Log         *slog.Logger
	Secrets     []string
	Metrics     *telemetry.Metrics
	Health      *telemetry.Health
	Tracing     *telemetry.Tracing
	Mem         *membudget.Budget
	Clients     *broker.Clients
	Pool        *pgxpool.Pool
	Positions   *dedup.Positions
	DeadLetters *deadletter.Writer
	// Known is what the group had of the topic when the consumer started
	// (nil: nothing is known, the StartOffset policy applies as is).
	Known *KnownPartitions
}

// Replay is what a dead-letter replay changes in the record step shared with
// the live consumer; the pipelines call it only when Deps.Replay is set.
type Replay interface {
	// Decode fills it from the dead letter m: the original event as the
	// live consumer read it (it.Msg stays m, whose offset the positions
	// use), or State record.Passed for a record the replay passes over.
	Decode(w *Worker, it *record.Item, m kafka.Message)
	// Record runs in the transaction that records the position after
	// items (each item's outcome final): it stores their outcomes with it.
	Record(ctx context.Context, tx pgx.Tx, w *Worker, items []*record.Item) error
	// DeadLetter builds the record a replayed event that failed again is
	// written back to the dead-letter topic as.
	DeadLetter(it *record.Item, now time.Time) kafka.Message
	// Committed reports that the partition's position reached next
	// durably, with its outcomes and write-backs.
	Committed(w *Worker, next int64)
}

// PosKey is the topic column of the partitions' positions.
func (c *Deps) PosKey() string {
	if c.PositionsKey != "" {
		return c.PositionsKey
	}
	return c.Topic
}

type Worker struct {
	D *Deps
	// Gen is the group generation; nil for a replay, which commits no
	// offsets to Kafka (its progress is its positions).
	Gen       *kafka.Generation
	Partition int
	Offset    int64                   // the committed offset the assignment came with
	HardCtx   context.Context         // ends only when the shutdown grace period is over
	Fatal     context.CancelCauseFunc // stops Run with an error
	RunCtx    context.Context         // ends when shutdown begins
	GenCtx    context.Context
	Log       *slog.Logger
	Reader    *kafka.Reader
	Mem       *membudget.Partition // this worker's part of the memory budget
	// AssignStart is where this assignment started; DBPos is the position
	// this worker last read from or recorded in the database (noPosition:
	// none). See positions.go.
	AssignStart int64
	DBPos       int64
	// Span is the context of the current batch's span, which Decode gives
	// each record; invalid when tracing is off.
	Span trace.SpanContext
	// Without a generation (a replay): Until is the offset the worker
	// stops at (Commit calls Stop once the position reaches it), Shares
	// the partitions sharing the memory budget.
	Until  int64
	Stop   context.CancelFunc
	Shares int
}

var ErrAbandoned = errors.New("batch abandoned")

func (w *Worker) Run(genCtx context.Context, pipeline func(*Worker)) {
	c := w.D
	w.GenCtx = genCtx
	shares := w.Shares
	if w.Gen != nil {
		w.Log = c.Log.With("partition", w.Partition, "generation", w.Gen.ID)
		shares = len(w.Gen.Assignments[c.Topic])
	} else {
		w.Log = c.Log.With("partition", w.Partition)
	}
	// The memory budget is shared by the partitions of this generation.
	w.Mem = c.Mem.ForPartitions(max(shares, 1), c.Envelope.MaxBytes)
	defer w.Mem.Release()
	w.Reader = kafka.NewReader(kafka.ReaderConfig{
		Brokers:        c.Clients.Brokers,
		Topic:          c.Topic,
		Partition:      w.Partition,
		Dialer:         c.Clients.Dialer,
		QueueCapacity:  w.Mem.Plan.QueueCapacity,
		MinBytes:       1,
		MaxBytes:       w.Mem.Plan.FetchMaxBytes,
		MaxWait:        cmp.Or(c.FetchMaxWait, 500*time.Millisecond),
		ReadBackoffMin: 50 * time.Millisecond,
		ReadBackoffMax: time.Second,
		MaxAttempts:    3,
		IsolationLevel: c.Isolation,
		Logger:         broker.Logger{Log: c.Log, Level: slog.LevelDebug - 4},
		ErrorLogger:    broker.Logger{Log: c.Log, Level: slog.LevelDebug},
	})
	defer w.Reader.Close()
	pl := telemetry.PartLabel(w.Partition)
	defer c.Metrics.Lag.DeleteLabelValues(c.Topic, pl)
	defer c.Metrics.Committed.DeleteLabelValues(c.Topic, pl)
	start, ok := w.start()
	if !ok {
		return
	}
	if err := w.Reader.SetOffset(start); err != nil {
		w.Log.Error("setting the start offset", "offset", start, "err", err)
		return
	}
	w.Log.Debug("partition assigned", "committedOffset", w.Offset, "offset", start)
	pipeline(w)
}

// Commit commits next as the partition's offset, retrying while the
// generation lasts; false when the worker should stop. Without a generation
// (a replay) nothing is committed to Kafka: the position is already in the
// database, and the worker stops once it reaches Until.
func (w *Worker) Commit(next, highWater int64) bool {
	c := w.D
	if w.Gen == nil {
		if c.Replay != nil && highWater >= 0 {
			c.Replay.Committed(w, next)
		}
		if next >= w.Until && w.Stop != nil {
			w.Stop()
		}
		return w.GenCtx.Err() == nil
	}
	bo := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	for {
		start := time.Now()
		err := w.Gen.CommitOffsets(map[string]map[int]int64{c.Topic: {w.Partition: next}})
		if err == nil {
			c.Metrics.CommitSeconds.Observe(time.Since(start).Seconds())
			pl := telemetry.PartLabel(w.Partition)
			c.Metrics.Committed.WithLabelValues(c.Topic, pl).Set(float64(next))
			if highWater >= next {
				c.Metrics.Lag.WithLabelValues(c.Topic, pl).Set(float64(highWater - next))
			}
			if d := c.Health.OK(telemetry.CompKafka); d > 0 {
				w.Log.Info("broker reachable again", "outage", d.Round(time.Millisecond))
			}
			return w.GenCtx.Err() == nil
		}
		if w.GenCtx.Err() != nil || w.HardCtx.Err() != nil {
			// The partition may already belong to another member; it will
			// start from the last committed offset and the dedup table
			// absorbs the replay.
			w.Log.Info("offset not committed: generation ended", "offset", next, "err", err)
			return false
		}
		c.Metrics.InfraErrors.WithLabelValues(telemetry.CompKafka).Inc()
		if c.Health.Fail(telemetry.CompKafka, err) {
			w.Log.Warn("committing the offset failed; retrying", "offset", next, "err", err)
		}
		if !backoff.Sleep(w.GenCtx, bo.Next()) {
			return false
		}
	}
}

func (w *Worker) Pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.GenCtx.Done():
		return false
	case <-w.HardCtx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *Worker) Decode(it *record.Item, m kafka.Message) {
	if r := w.D.Replay; r != nil {
		r.Decode(w, it, m)
		return
	}
	record.Decode(it, m, w.Span, w.D.Envelope, w.D.Policies)
}

func (w *Worker) DeadLetter(items []record.Item) error {
	c := w.D
	var msgs []kafka.Message
	now := time.Now()
	for i := range items {
		it := &items[i]
		if it.State == record.Rejected && it.Policy == event.PolicyDeadLetter {
			if c.Replay != nil {
				msgs = append(msgs, c.Replay.DeadLetter(it, now))
				continue
			}
			msgs = append(msgs, c.DeadLetters.Message(it, now))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	bo := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	for {
		err := c.DeadLetters.Write(w.HardCtx, msgs)
		if err == nil {
			if d := c.Health.OK(telemetry.CompDLQ); d > 0 {
				w.Log.Info("dead-letter topic writable again", "outage", d.Round(time.Millisecond))
			}
			return nil
		}
		c.Metrics.InfraErrors.WithLabelValues(telemetry.CompDLQ).Inc()
		err = redact.Err(err, c.Secrets...)
		if c.Health.Fail(telemetry.CompDLQ, err) {
			w.Log.Warn("writing to the dead-letter topic failed; retrying, offset held", "err", err, "topic", c.DeadLetterTopic)
		}
		if !w.Pause(bo.Next()) {
			return ErrAbandoned
		}
	}
}

func (w *Worker) StartBatchSpan(batch []kafka.Message) telemetry.BatchSpan {
	bs := w.D.Tracing.StartBatch(w.Partition, batch)
	w.Span = bs.Context()
	return bs
}
