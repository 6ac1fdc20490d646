package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
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

// TestLostPartOfSplitBatchIsRedone: a batch committed in several
// transactions (here split because a deferred constraint refused the
// commit) checks each transaction's position against the one this worker
// recorded last, including the batch's own earlier parts. The test makes
// the database lose the first part after it committed, as a failover to an
// asynchronous standby does, before the next part's transaction runs:
// before the fix the next part compared the database's position with the
// one recorded before the batch, found nothing behind, and committed the
// offset past the lost part, whose effects never came back.
func TestLostPartOfSplitBatchIsRedone(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ctx := context.Background()
	ids := deferredChildFixture(t, e)

	// The first attempt of the whole batch is refused at COMMIT (offset 3's
	// row), so the runtime commits offsets 0-1 alone, then tries 2-3. The
	// first call of offset 2's handler in that second part makes the
	// database lose part 0-1 (once the part's transaction is rolled back
	// and no longer locks the position row) and fails as a dependency
	// outage, so the part is retried after the loss.
	var calls2 atomic.Int32
	lost := make(chan error, 1)
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		parent := 1
		if ev.Offset == 3 {
			parent = 999 // no such parent: refused at COMMIT
		}
		if ev.Offset == 2 {
			var committed int
			if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM child WHERE event_id = ANY($1)`, ids[:2]).Scan(&committed); err != nil {
				return err
			}
			if committed == 2 && calls2.Add(1) == 1 {
				go func() {
					_, err := e.pool.Exec(context.Background(), `
						WITH p AS (UPDATE processed_event_offsets SET next_offset = 0 WHERE kafka_partition = 0),
						     d AS (DELETE FROM processed_event WHERE event_id = ANY($1))
						DELETE FROM child WHERE event_id = ANY($1)`, ids[:2])
					lost <- err
				}()
				return consumer.Unavailable(errors.New("dependency outage"))
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO child (event_id, parent_id) VALUES ($1, $2)`, ev.ID, parent)
		return err
	}
	e.start(e.config(func(c *consumer.Config) { c.HandlerMaxAttempts = 1 }), h)
	e.waitCaughtUp(t, 30*time.Second)
	select {
	case err := <-lost:
		if err != nil {
			t.Fatalf("simulating the loss: %v", err)
		}
	default:
		t.Fatal("the loss of the first part was never simulated")
	}
	for i, id := range ids {
		var rows, dedupRows int
		if err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM child WHERE event_id = $1),
			(SELECT count(*) FROM processed_event WHERE event_id = $1)`, id).Scan(&rows, &dedupRows); err != nil {
			t.Fatal(err)
		}
		want := 1
		if i == 3 {
			want = 0
		}
		if rows != want || dedupRows != want {
			t.Errorf("event at offset %d: %d rows and %d dedup rows, want %d and %d", i, rows, dedupRows, want, want)
		}
	}
}

// TestHandlerCommitAndChainLosesNoLaterEvent: COMMIT AND CHAIN (or COMMIT;
// BEGIN) sent by a handler commits the dedup rows of every event of the
// transaction and leaves a transaction open, so nothing looks ended; the
// next event's RELEASE then finds the savepoint gone. The events after the
// chaining one must still take effect, and a later failing one must still be
// dead-lettered: before the fix the redo took them all for duplicates. In
// "safe mode" the transaction was already redone once (offset 0's first
// call fails to prepare), so the savepoints run in round trips of their own.
func TestHandlerCommitAndChainLosesNoLaterEvent(t *testing.T) {
	for _, safe := range []bool{false, true} {
		name := "pipelined"
		if safe {
			name = "safe mode"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.dumpLogsOnFailure(t)
			ids := []uuid.UUID{newID(t), newID(t), newID(t), newID(t)}
			var msgs []kafka.Message
			for _, id := range ids {
				msgs = append(msgs, event(id, 0, ""))
			}
			e.kafka.Produce(t, e.topic, msgs...)
			var first atomic.Bool
			first.Store(safe)
			h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				switch ev.Offset {
				case 0:
					if first.CompareAndSwap(true, false) {
						_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, no_such_column) VALUES ($1, 1)`, ev.ID)
						return err
					}
				case 3:
					return consumer.Permanent(errors.New("event 3 is bad"))
				}
				if err := effectWithArgs(ctx, tx, ev); err != nil {
					return err
				}
				if ev.Offset == 1 {
					_, err := tx.Exec(ctx, `COMMIT AND CHAIN`)
					return err
				}
				return nil
			}
			e.start(e.config(func(c *consumer.Config) { c.HandlerMaxAttempts = 1 }), h)
			e.waitCaughtUp(t, 30*time.Second)
			assertEffectAndDedupRow(t, e, ids, []bool{true, true, true, false})
			dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 5*time.Second)
			if len(dl) != 1 || header(dl[0], consumer.HeaderDLQOriginalOffset) != "3" {
				t.Fatalf("want one dead letter, for offset 3; got %d", len(dl))
			}
		})
	}
}
