package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
)

// TestRelay_KeyOrderUnderConcurrentTransactions: workers emit on a few keys
// in transactions that take their transaction id early or late, sleep before
// committing, and sometimes roll back, while another session keeps opening
// transactions that hold the horizon back. Each transaction records, while
// it holds its key's lock, a number from a sequence: for one key, that is
// its commit order. On the topic, the first publication of each committed
// event comes in that order for every key, nothing rolled back is
// published, and nothing committed is missing.
func TestRelay_KeyOrderUnderConcurrentTransactions(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 3)
	if _, err := e.pool.Exec(ctx, `CREATE SEQUENCE commit_order; CREATE TABLE emitted (event_id uuid PRIMARY KEY, key text, n bigint)`); err != nil {
		t.Fatal(err)
	}
	r := e.start(t, nil)
	waitFor(t, 10*time.Second, "the relay to own the stream", r.owner)
	time.Sleep(2500 * time.Millisecond) // past the takeover delay: the relay publishes while the workers run

	stop := make(chan struct{})
	var holders sync.WaitGroup
	holders.Add(1)
	go func() { // keeps the horizon back, on and off
		defer holders.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`)
				time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
				return err
			})
			time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
		}
	}()

	const workers, perWorker, keys = 8, 80, 5
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				key := fmt.Sprintf("key-%d", rand.IntN(keys))
				tx, err := e.pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if rand.IntN(2) == 0 { // take the transaction id early
					_, err = tx.Exec(ctx, `SELECT pg_current_xact_id()`)
				}
				time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
				var id fmt.Stringer
				if err == nil {
					id, err = outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: "orders", Key: []byte(key), Payload: []byte(fmt.Sprint(w, i))})
				}
				if err == nil {
					_, err = tx.Exec(ctx, `INSERT INTO emitted VALUES ($1::uuid, $2, nextval('commit_order'))`, id.String(), key)
				}
				time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
				if err == nil && rand.IntN(5) == 0 {
					if err := tx.Rollback(ctx); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				if err == nil {
					err = tx.Commit(ctx)
				}
				if err != nil {
					_ = tx.Rollback(context.Background())
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	holders.Wait()

	rows, err := e.pool.Query(ctx, `SELECT event_id::text, key, n FROM emitted`)
	if err != nil {
		t.Fatal(err)
	}
	type em struct {
		key string
		n   int64
	}
	committed := map[string]em{}
	for rows.Next() {
		var id string
		var x em
		if err := rows.Scan(&id, &x.key, &x.n); err != nil {
			t.Fatal(err)
		}
		committed[id] = x
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	got, _ := e.readDistinct(t, "orders", 3, len(committed))
	last := map[string]int64{}
	first := map[string]bool{}
	for _, r := range got {
		c, ok := committed[r.id]
		if !ok {
			t.Errorf("published %s, which was rolled back", r.id)
			continue
		}
		if first[r.id] {
			continue
		}
		first[r.id] = true
		if c.n < last[r.key] {
			t.Errorf("key %s: event with commit number %d first published after number %d", r.key, c.n, last[r.key])
		}
		last[r.key] = c.n
	}
	if len(first) != len(committed) {
		t.Errorf("%d of %d committed events published", len(first), len(committed))
	}
	t.Logf("%d committed events, %d records (%d repeats)", len(committed), len(got), len(got)-len(first))
}
