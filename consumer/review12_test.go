package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestHandlerCommitLosesNoLaterEvent: a handler that sends COMMIT as SQL
// commits the batch transaction so far, and with it the dedup rows the
// runtime inserted for every event of the transaction, including the events
// whose handlers have not run yet. The redo must still run those handlers:
// before the fix they were all taken for duplicates and their effects were
// lost while the offset moved on. Two handlers do it (offsets 1 and 2), so
// the redo itself is ended by a COMMIT too.
func TestHandlerCommitLosesNoLaterEvent(t *testing.T) {
	for _, mode := range []string{"cache_statement", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			e.dumpLogsOnFailure(t)
			ids := []uuid.UUID{newID(t), newID(t), newID(t), newID(t)}
			var msgs []kafka.Message
			for _, id := range ids {
				msgs = append(msgs, event(id, 0, ""))
			}
			e.kafka.Produce(t, e.topic, msgs...)
			h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				if err := effectWithArgs(ctx, tx, ev); err != nil {
					return err
				}
				if ev.Offset == 1 || ev.Offset == 2 {
					_, err := tx.Exec(ctx, `COMMIT`)
					return err
				}
				return nil
			}
			e.start(e.config(func(c *consumer.Config) {
				c.HandlerMaxAttempts = 1
				c.DatabaseURL = dsnWithParam(t, e.dsn, "default_query_exec_mode", mode)
			}), h)
			e.waitCaughtUp(t, 30*time.Second)
			// Offsets 1 and 2 committed their own effect with their dedup
			// row (nothing can undo that); the events after each COMMIT had
			// not run and must take effect now, each exactly once.
			assertEffectAndDedupRow(t, e, ids, []bool{true, true, true, true})
		})
	}
}
