package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestHandlerTx exercises what a handler may do with its tx: every query
// method, a nested transaction, a partial write followed by an error (undone
// by the savepoint before the retry), no database use at all, and an attempt
// to commit the runtime's transaction (refused).
func TestHandlerTx(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ids := make([]uuid.UUID, 8)
	var msgs []kafka.Message
	for i := range ids {
		ids[i] = newID(t)
		msgs = append(msgs, event(ids[i], 0, ""))
	}
	e.kafka.Produce(t, e.topic, msgs...)
	ins := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, part, off) VALUES ($1, $2, $3)`, ev.ID, ev.Partition, ev.Offset)
		return err
	}
	var mu sync.Mutex
	attempts := map[int]int{}
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		mu.Lock()
		attempts[int(ev.Offset)]++
		n := attempts[int(ev.Offset)]
		mu.Unlock()
		switch ev.Offset {
		case 0: // multi-statement simple-protocol Exec
			_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, part, off) VALUES ('`+ev.ID.String()+`', 0, 0); SELECT 1`)
			return err
		case 1: // QueryRow with RETURNING
			var seq int64
			return tx.QueryRow(ctx, `INSERT INTO effect (event_id, part, off) VALUES ($1, 0, 1) RETURNING seq`, ev.ID).Scan(&seq)
		case 2: // write, then fail: the write must not survive the retry
			if err := ins(ctx, tx, ev); err != nil {
				return err
			}
			if n == 1 {
				return errors.New("transient")
			}
			return nil
		case 3: // no database use
			return nil
		case 4: // nested transaction
			nt, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if err := ins(ctx, nt, ev); err != nil {
				return err
			}
			return nt.Commit(ctx)
		case 5: // trying to commit the batch: refused, the event fails
			if err := ins(ctx, tx, ev); err != nil {
				return err
			}
			return tx.Commit(ctx)
		case 6: // Query
			rows, err := tx.Query(ctx, `INSERT INTO effect (event_id, part, off) VALUES ($1, 0, 6) RETURNING seq`, ev.ID)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		default:
			return ins(ctx, tx, ev)
		}
	}
	r := e.start(e.config(func(c *consumer.Config) { c.HandlerMaxAttempts = 2 }), h)
	e.waitCaughtUp(t, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	rows, err := e.pool.Query(context.Background(), `SELECT off, count(*) FROM effect GROUP BY off ORDER BY off`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]int{}
	for rows.Next() {
		var off int64
		var n int
		if err := rows.Scan(&off, &n); err != nil {
			t.Fatal(err)
		}
		got[off] = n
	}
	want := map[int64]int{0: 1, 1: 1, 2: 1, 4: 1, 6: 1, 7: 1}
	if len(got) != len(want) {
		t.Fatalf("effects per offset %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("effects per offset %v, want %v", got, want)
		}
	}
	dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 5*time.Second)
	if len(dl) != 1 || header(dl[0], consumer.HeaderDLQOriginalOffset) != "5" {
		t.Fatalf("want one dead letter, for offset 5 (the commit attempt); got %d", len(dl))
	}
}
