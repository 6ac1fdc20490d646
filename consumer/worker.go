package consumer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/internal/membudget"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
)

// worker consumes one Kafka partition for one group generation. kafka-go runs
// it through Generation.Start: its context ends when the generation does (a
// rebalance, a lost coordinator, or Close at shutdown).
type worker struct {
	c         *Consumer
	gen       *kafka.Generation
	partition int
	offset    int64
	hardCtx   context.Context         // ends only when the shutdown grace period is over
	fatal     context.CancelCauseFunc // stops Run with an error
	runCtx    context.Context         // ends when shutdown begins
	genCtx    context.Context
	log       *slog.Logger
	inserter  *dedup.Inserter
	reader    *kafka.Reader
	guard     txGuard              // batch-transaction safety nets (txguard.go)
	mem       *membudget.Partition // this worker's part of the memory budget (membudget.go)
	// assignStart is where this assignment started; dbPos is the position
	// this worker last read from or recorded in the database (noPosition:
	// none). See positions.go.
	assignStart int64
	dbPos       int64
	// span is the context of the current batch's span, which decode gives
	// each record (tracing.go); invalid when tracing is off.
	span trace.SpanContext
}

// errAbandoned means a batch was given up uncommitted because the generation
// ended (or shutdown ran out of time) while it was waiting: the partition's
// next owner gets its events again, and the dedup rows absorb what this
// worker already committed to the database.
var errAbandoned = errors.New("batch abandoned")

func (w *worker) run(genCtx context.Context) {
	c := w.c
	w.genCtx = genCtx
	w.log = c.log.With("partition", w.partition, "generation", w.gen.ID)
	w.inserter = c.inserter
	// The memory budget is shared by the partitions of this generation.
	w.mem = c.mem.ForPartitions(len(w.gen.Assignments[c.cfg.Topic]), c.cfg.Envelope.MaxBytes)
	defer w.mem.Release()
	w.reader = kafka.NewReader(kafka.ReaderConfig{
		Brokers:        c.cfg.Brokers,
		Topic:          c.cfg.Topic,
		Partition:      w.partition,
		Dialer:         c.kafka.Dialer,
		QueueCapacity:  w.mem.Plan.QueueCapacity,
		MinBytes:       1,
		MaxBytes:       w.mem.Plan.FetchMaxBytes,
		MaxWait:        500 * time.Millisecond,
		ReadBackoffMin: 50 * time.Millisecond,
		ReadBackoffMax: time.Second,
		MaxAttempts:    3,
		IsolationLevel: c.cfg.Isolation.kafkaLevel(),
		Logger:         broker.Logger{Log: c.log, Level: slog.LevelDebug - 4},
		ErrorLogger:    broker.Logger{Log: c.log, Level: slog.LevelDebug},
	})
	defer w.reader.Close()
	pl := telemetry.PartLabel(w.partition)
	defer c.metrics.Lag.DeleteLabelValues(c.cfg.Topic, pl)
	defer c.metrics.Committed.DeleteLabelValues(c.cfg.Topic, pl)
	start, ok := w.start()
	if !ok {
		return
	}
	if err := w.reader.SetOffset(start); err != nil {
		w.log.Error("setting the start offset", "offset", start, "err", err)
		return
	}
	w.log.Debug("partition assigned", "committedOffset", w.offset, "offset", start)
	if c.external != nil {
		w.runExternal()
		return
	}

	fetchBackoff := backoff.New(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	for {
		batch, err := w.collect()
		if len(batch) == 0 {
			if genCtx.Err() != nil || w.hardCtx.Err() != nil || errors.Is(err, errAbandoned) {
				return
			}
			if err != nil {
				c.metrics.InfraErrors.WithLabelValues(telemetry.CompKafka).Inc()
				err = redact.Err(err, c.secrets...)
				if c.health.Fail(telemetry.CompKafka, err) {
					w.log.Warn("fetching from the broker failed; retrying", "err", err)
				}
				if !backoff.Sleep(genCtx, fetchBackoff.Next()) {
					return
				}
			}
			continue
		}
		fetchBackoff.Reset()
		c.health.OK(telemetry.CompKafka)
		next, err := w.process(batch)
		var rw *rewindError
		if errors.As(err, &rw) {
			if !w.rewind(rw) {
				return
			}
			continue
		}
		if err == nil {
			w.dbPos = next
		}
		if err != nil {
			if !errors.Is(err, errAbandoned) {
				w.fatal(err)
			}
			return
		}
		if !w.commit(next, batch[len(batch)-1].HighWaterMark) {
			return
		}
	}
}

// collect fetches up to BatchSize records (and at most the partition's batch
// bytes of the memory budget, the first record excepted): it waits for the
// first without a limit (checking the database's position every
// positionCheckInterval meanwhile), then at most BatchWait for the rest. The
// previous batch is done when it is called, so its bytes are released first;
// a record that does not fit is carried over to start the next batch.
func (w *worker) collect() ([]kafka.Message, error) {
	w.mem.Release()
	first, ok := w.mem.TakeCarry(w.reader)
	for !ok {
		ctx, cancel := context.WithTimeout(w.genCtx, positionCheckInterval)
		m, err := w.reader.FetchMessage(ctx)
		cancel()
		if err == nil {
			first, ok = m, true
			break
		}
		if w.genCtx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if !w.idleCheck() {
			return nil, errAbandoned
		}
	}
	if err := w.mem.First(w.genCtx, &first); err != nil {
		return nil, err // the generation ended while other batches held the budget
	}
	batch := make([]kafka.Message, 1, min(w.c.cfg.BatchSize, 1024))
	batch[0] = first
	if w.c.cfg.BatchSize == 1 {
		return batch, nil
	}
	ctx, cancel := context.WithTimeout(w.genCtx, w.c.cfg.BatchWait)
	defer cancel()
	for len(batch) < w.c.cfg.BatchSize {
		m, err := w.reader.FetchMessage(ctx)
		if err != nil {
			break // the wait is over, or the generation ended: process what we have
		}
		if !w.mem.Next(&m) {
			break // carried over: the batch is full in bytes
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// commit commits the offset after the batch, retrying while the generation
// lasts. It reports false when the worker should stop.
func (w *worker) commit(next, highWater int64) bool {
	c := w.c
	bo := backoff.New(DefaultRetryBackoff, c.cfg.RetryBackoffMax)
	for {
		start := time.Now()
		err := w.gen.CommitOffsets(map[string]map[int]int64{c.cfg.Topic: {w.partition: next}})
		if err == nil {
			c.metrics.CommitSeconds.Observe(time.Since(start).Seconds())
			pl := telemetry.PartLabel(w.partition)
			c.metrics.Committed.WithLabelValues(c.cfg.Topic, pl).Set(float64(next))
			if highWater >= next {
				c.metrics.Lag.WithLabelValues(c.cfg.Topic, pl).Set(float64(highWater - next))
			}
			if d := c.health.OK(telemetry.CompKafka); d > 0 {
				w.log.Info("broker reachable again", "outage", d.Round(time.Millisecond))
			}
			return w.genCtx.Err() == nil
		}
		if w.genCtx.Err() != nil || w.hardCtx.Err() != nil {
			// The partition may already belong to another member; it will
			// start from the last committed offset and the dedup table
			// absorbs the replay.
			w.log.Info("offset not committed: generation ended", "offset", next, "err", err)
			return false
		}
		c.metrics.InfraErrors.WithLabelValues(telemetry.CompKafka).Inc()
		if c.health.Fail(telemetry.CompKafka, err) {
			w.log.Warn("committing the offset failed; retrying", "offset", next, "err", err)
		}
		if !backoff.Sleep(w.genCtx, bo.Next()) {
			return false
		}
	}
}
