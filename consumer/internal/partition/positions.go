package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// Positions in the database. Every batch transaction also records the
// partition's next offset in the dedup table's positions table, so the
// database itself says how far its effects go. Kafka's committed offset is
// written after the transaction, and is ahead of the database when the
// database lost committed transactions (a failover to an asynchronous
// standby): a partition then restarts from the database's position and the
// dedup rows absorb whatever did survive. Starting from the smaller of the two
// positions is always safe; starting from the larger would skip records when
// the database is behind, and would ignore an offset reset made in Kafka to
// replay records.

// PositionCheckInterval is how long a partition waits for records before its
// worker compares the database's position with the one it recorded last, so
// a failover that lost the last batches of a quiet partition is noticed
// without waiting for its next record.
const PositionCheckInterval = 10 * time.Second

// noPosition is dbPos when the worker expects no row for its partition.
const noPosition = -1

// RewindError means the batch transaction found the partition's position in
// the database behind the one this worker recorded: the database lost
// committed transactions. The transaction is rolled back and the worker
// restarts from the database's position.
type RewindError struct {
	To    int64 // where to restart
	Found bool  // the database had a position (else the row is gone)
}

func (e *RewindError) Error() string {
	return fmt.Sprintf("the database's position is behind this worker's: restarting from offset %d", e.To)
}

// start decides where the newly assigned partition starts, before anything
// is processed: Kafka's committed offset, or, when the group has none, the
// StartOffset policy resolved to a real offset and committed at once (a
// crash before the first batch, or a partition added later, would otherwise
// make the next owner resolve "latest" again and skip what arrived
// meanwhile); then the database's position instead when it is behind. A
// partition without a database position gets one. It retries while the
// generation lasts and reports false when the worker should stop.
func (w *Worker) start() (int64, bool) {
	c := w.D
	bo := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	for {
		start, commit, err := w.resolveStart()
		if err == nil {
			c.Health.OK(telemetry.CompSetup)
			w.AssignStart = start
			if commit && !w.Commit(start, -1) {
				return 0, false
			}
			return start, true
		}
		if w.GenCtx.Err() != nil || w.HardCtx.Err() != nil {
			return 0, false
		}
		c.Metrics.InfraErrors.WithLabelValues(telemetry.CompSetup).Inc()
		err = redact.Err(err, c.Secrets...)
		if c.Health.Fail(telemetry.CompSetup, err) {
			w.Log.Warn("deciding the partition's start offset failed; retrying", "err", err)
		}
		if !w.Pause(bo.Next()) {
			return 0, false
		}
	}
}

// resolveStart is one attempt of start; commit says the start offset must be
// committed to Kafka before processing (the group had none). Every start
// resolves the log's bounds: a start before the log start (a consumer down
// longer than the topic's retention) would make the reader jump to it
// silently, so the records in between are counted and logged as lost
// (clampToLog) and the start moved there explicitly.
func (w *Worker) resolveStart() (start int64, commit bool, err error) {
	c := w.D
	ctx, cancel := context.WithTimeout(w.GenCtx, 30*time.Second)
	defer cancel()
	first, end, err := w.D.Clients.LogBounds(ctx, w.D.Topic, w.Partition)
	if err != nil {
		return 0, false, err
	}
	start = w.Offset
	if start < 0 { // kafka.FirstOffset or kafka.LastOffset: no committed offset
		commit = true
		if start == kafka.LastOffset {
			start = end
		} else {
			start = first
		}
		if why := c.Known.New(w.Partition); start != first && why != "" {
			w.Log.Info("no committed offset, and the partition is new to the group: reading it from its start whatever the StartOffset policy (all of its records are new; latest would skip those written before its first assignment)",
				"why", why, "startOffset", c.StartOffset, "offset", first)
			start = first
		} else if w.Gen != nil {
			w.Log.Info("no committed offset: starting from the StartOffset policy's offset", "startOffset", c.StartOffset, "offset", start)
		}
	}
	w.DBPos = noPosition
	if c.DisableDedup {
		return w.clampToLog(start, first, posCommitted), commit, nil
	}
	db, ok, err := c.Positions.Read(ctx, c.Pool, c.PosKey(), w.Partition)
	if err != nil {
		return 0, false, err
	}
	switch {
	case !ok:
		start = w.clampToLog(start, first, posCommitted)
		// Record where this assignment starts, so that a failover that
		// loses this partition's first batches finds it and goes back.
		if _, _, err := c.Positions.Record(ctx, c.Pool, c.PosKey(), w.Partition, start); err != nil {
			return 0, false, err
		}
		w.DBPos = start
	case db < start:
		w.DBPos = db
		c.Metrics.Rewinds.WithLabelValues(c.Topic).Inc()
		w.Log.Warn("the database's position is behind the committed offset: starting from the database's (it lost committed batches, e.g. in a failover to an asynchronous standby; the dedup rows absorb what survived)",
			"committedOffset", start, "databasePosition", db)
		start = w.clampToLog(db, first, posDatabase)
	default:
		// The database may be ahead: a crash between the transaction and
		// the offset commit, or offsets reset in Kafka to replay. Kafka's
		// offset is then the safe one. The records up to the database's
		// position took effect: only those after it can be lost.
		w.DBPos = db
		if start < first {
			w.clampToLog(db, first, posDatabase)
			start = first
		}
	}
	return start, commit, nil
}

// KnownPartitions is what the group had of its topic when the consumer
// started. A partition it then starts without a committed offset is new to
// the group, and read from its start whatever the StartOffset policy, when
// the topic appeared only after the consumer started, or when the group had
// positions for the topic but not for this partition (it was added while the
// group ran, or while it was down), or, for a group that had none, when the
// partition was added after the consumer started. Kafka's "latest" would
// skip every record written to such a partition before its first
// assignment, and all of them are new.
type KnownPartitions struct {
	TopicAppeared bool         // the topic did not exist when the consumer started
	Had           map[int]bool // partitions with a position in the database
	Count         int          // partitions the topic had
}

// New says why partition p is new to the group ("" if it is not).
func (k *KnownPartitions) New(p int) string {
	switch {
	case k == nil:
		return ""
	case k.TopicAppeared:
		return "the topic was created after the consumer started"
	case len(k.Had) > 0 && !k.Had[p]:
		return "the group has positions for other partitions of the topic, not for this one: it was added"
	case len(k.Had) == 0 && p >= k.Count:
		return "the partition was added after the consumer started"
	}
	return ""
}

// Which position clampToLog was given, for its log line.
const (
	posCommitted = "committedOffset"
	posDatabase  = "databasePosition"
)

// clampToLog returns off, or the log start when off is before it: the records
// in between were deleted by the topic's retention before their effects were
// durable in the database, and nothing can redeliver them. They are counted
// in records_lost_to_retention_total and logged as an error (the alert
// IdempotencyRecordsLostToRetention fires on the counter). The logger
// names the topic and the partition.
func (w *Worker) clampToLog(off, first int64, what string) int64 {
	if off >= first {
		return off
	}
	w.D.Metrics.LostToRetention.WithLabelValues(w.D.Topic).Add(float64(first - off))
	w.Log.Error("records lost: the partition's position is before the start of the log; the records in between were deleted by the topic's retention before their effects were durable, and are never processed",
		"position", off, "positionOf", what, "logStart", first, "records", first-off)
	return first
}

// RecordPosition records the batch's next offset in tx (one statement, in the
// batch transaction) and checks the position it replaces: behind the one this
// worker recorded last means the database lost committed transactions, and
// the batch must not commit on top of the gap (*RewindError).
func (w *Worker) RecordPosition(ctx context.Context, tx pgx.Tx, items []record.Item) error {
	c := w.D
	if c.DisableDedup || len(items) == 0 {
		return nil
	}
	next := items[len(items)-1].Msg.Offset + 1
	prev, ok, err := c.Positions.Record(ctx, tx, c.PosKey(), w.Partition, next)
	if err != nil {
		return record.Infra("recording the partition's position: %w", err)
	}
	return w.Behind(prev, ok)
}

// Behind compares the database's position (ok false: no row) with dbPos.
func (w *Worker) Behind(db int64, ok bool) error {
	switch {
	case ok && db < w.DBPos:
		return &RewindError{To: db, Found: true}
	case !ok && w.DBPos != noPosition:
		// The row itself is gone, with everything since this assignment
		// created or read it.
		return &RewindError{To: w.AssignStart}
	}
	return nil
}

// Rewind restarts the partition's reader at rw.To (or the log start). It
// reports false when the worker should stop.
func (w *Worker) Rewind(rw *RewindError) bool {
	c := w.D
	// The log start is needed first: an offset before it is out of range,
	// which the reader would retry forever.
	var first int64
	bo := backoff.New(backoff.DefaultInitial, c.RetryBackoffMax)
	for {
		ctx, cancel := context.WithTimeout(w.GenCtx, 30*time.Second)
		f, _, err := w.D.Clients.LogBounds(ctx, w.D.Topic, w.Partition)
		cancel()
		if err == nil {
			first = f
			break
		}
		c.Metrics.InfraErrors.WithLabelValues(telemetry.CompKafka).Inc()
		if c.Health.Fail(telemetry.CompKafka, redact.Err(err, c.Secrets...)) {
			w.Log.Warn("rewinding to the database's position: listing offsets failed; retrying", "err", redact.Err(err, c.Secrets...))
		}
		if !w.Pause(bo.Next()) {
			return false
		}
	}
	c.Metrics.Rewinds.WithLabelValues(c.Topic).Inc()
	w.Log.Warn("the database's position is behind this worker's: it lost committed batches (e.g. a failover to an asynchronous standby); reprocessing from the database's position",
		"databasePosition", rw.To, "recorded", w.DBPos, "rowFound", rw.Found)
	to := w.clampToLog(rw.To, first, posDatabase)
	if err := w.Reader.SetOffset(to); err != nil {
		w.Log.Error("rewinding the reader", "offset", to, "err", err)
		return false
	}
	if rw.Found {
		w.DBPos = rw.To
	} else {
		w.DBPos = noPosition
	}
	return true
}

// IdleCheck compares the database's position with dbPos while the partition
// is quiet, and rewinds when it is behind. It reports false when the worker
// should stop. A database error is left to the next batch to report.
func (w *Worker) IdleCheck() bool {
	c := w.D
	if c.DisableDedup {
		return true
	}
	ctx, cancel := context.WithTimeout(w.GenCtx, 10*time.Second)
	db, ok, err := c.Positions.Read(ctx, c.Pool, c.PosKey(), w.Partition)
	cancel()
	if err != nil {
		w.Log.Debug("checking the partition's position while idle", "err", redact.Err(err, c.Secrets...))
		return true
	}
	var rw *RewindError
	if errors.As(w.Behind(db, ok), &rw) {
		return w.Rewind(rw)
	}
	return true
}
