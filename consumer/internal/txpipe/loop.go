package txpipe

import (
	"context"
	"errors"
	"time"

	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/segmentio/kafka-go"
)

// Run processes the partition under a transactional handler until the
// generation ends: batch after batch, each in one transaction with its
// dedup rows and position, then its dead letters, then its offset.
func Run(pw *partition.Worker, cfg *Config) {
	w := &batcher{Worker: pw, c: &env{Deps: pw.D, Config: cfg}}
	c := w.c
	genCtx := w.GenCtx
	fetchBackoff := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	for {
		batch, err := w.collect()
		if len(batch) == 0 {
			if genCtx.Err() != nil || w.HardCtx.Err() != nil || errors.Is(err, partition.ErrAbandoned) {
				return
			}
			if err != nil {
				c.Metrics.InfraErrors.WithLabelValues(telemetry.CompKafka).Inc()
				err = redact.Err(err, c.Secrets...)
				if c.Health.Fail(telemetry.CompKafka, err) {
					w.Log.Warn("fetching from the broker failed; retrying", "err", err)
				}
				if !backoff.Sleep(genCtx, fetchBackoff.Next()) {
					return
				}
			}
			continue
		}
		fetchBackoff.Reset()
		c.Health.OK(telemetry.CompKafka)
		next, err := w.process(batch)
		var rw *partition.RewindError
		if errors.As(err, &rw) {
			if !w.Rewind(rw) {
				return
			}
			continue
		}
		if err == nil {
			w.DBPos = next
		}
		if err != nil {
			if !errors.Is(err, partition.ErrAbandoned) {
				w.Fatal(err)
			}
			return
		}
		if !w.Commit(next, batch[len(batch)-1].HighWaterMark) {
			return
		}
	}
}

// collect fetches up to BatchSize records (and at most the partition's batch
// bytes of the memory budget, the first record excepted): it waits for the
// first without a limit (checking the database's position every
// partition.PositionCheckInterval meanwhile), then takes the records that
// follow as long as each arrives within Linger of the one before, for at most
// BatchWait in all. A lone record goes alone at once, a burst goes together,
// and under load the reader's queue refills while a batch commits, so the
// next batch takes all of it (group commit). The previous batch is done when
// it is called, so its bytes are released first; a record that does not fit
// is carried over to start the next batch.
func (w *batcher) collect() ([]kafka.Message, error) {
	w.Mem.Release()
	first, ok := w.Mem.TakeCarry(w.Reader)
	for !ok {
		ctx, cancel := context.WithTimeout(w.GenCtx, partition.PositionCheckInterval)
		m, err := w.Reader.FetchMessage(ctx)
		cancel()
		if err == nil {
			first = m
			break
		}
		if w.GenCtx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if !w.IdleCheck() {
			return nil, partition.ErrAbandoned
		}
	}
	if err := w.Mem.First(w.GenCtx, &first); err != nil {
		return nil, err // the generation ended while other batches held the budget
	}
	batch := make([]kafka.Message, 1, min(w.c.BatchSize, 1024))
	batch[0] = first
	if w.c.BatchSize == 1 {
		return batch, nil
	}
	deadline := time.Now().Add(w.c.BatchWait)
	for len(batch) < w.c.BatchSize {
		wait := min(Linger, time.Until(deadline))
		if wait <= 0 {
			break
		}
		ctx, cancel := context.WithTimeout(w.GenCtx, wait)
		m, err := w.Reader.FetchMessage(ctx)
		cancel()
		if err != nil {
			break // nothing more within Linger, BatchWait is over, or the generation ended: process what we have
		}
		if !w.Mem.Next(&m) {
			break // carried over: the batch is full in bytes
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// Linger is how long a batch waits for the next record before it closes:
// the gap between two records that are part of one burst (the records of one
// fetch response follow each other within microseconds, and the next fetch
// answers within a round trip when more are waiting). Longer would make a
// lone record wait for nothing; shorter would cut bursts at fetch
// boundaries, which under load costs little, since the queue refills while a
// batch commits.
const Linger = 2 * time.Millisecond
