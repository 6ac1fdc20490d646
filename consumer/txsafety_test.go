package consumer_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestEventFailureIsolated: whatever the handler of the middle event of a
// batch does wrong with its tx, the events before and after it keep their
// effect together with their dedup row, and the middle event ends as
// handler_failed (dead-lettered, no effect, no dedup row) instead of
// stalling the partition or undoing its neighbour.
func TestEventFailureIsolated(t *testing.T) {
	cases := []struct {
		name string
		bad  consumer.Handler
	}{
		{
			// Defect 1: the statement fails to parse, so in the old joined
			// "RELEASE; SAVEPOINT; stmt" string none of it ran and the
			// rollback undid the previous event.
			name: "syntax error without arguments",
			bad: func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				_, err := tx.Exec(ctx, `INSERT INTO effect VALUS ('`+ev.ID.String()+`')`)
				return err
			},
		},
		{
			// Defect 1, second form: the handler writes, swallows a failed
			// statement and returns nil; the transaction is aborted.
			name: "swallowed database error",
			bad: func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				if err := effectWithArgs(ctx, tx, ev); err != nil {
					return err
				}
				_, _ = tx.Exec(ctx, `INSERT INTO effect (event_id, part, off) VALUES (NULL, 0, 1)`)
				return nil
			},
		},
		{
			// pgx prepares a new statement before sending the pipelined
			// savepoint: a prepare error aborts the transaction before the
			// event's savepoint exists.
			name: "statement with arguments that fails to prepare",
			bad: func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, no_such_column) VALUES ($1, 1)`, ev.ID)
				return err
			},
		},
		{
			// Defect 2: an int64 that does not fit the int4 column; pgx
			// refuses to encode it before anything is sent.
			name: "argument that cannot be encoded",
			bad: func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, part, off) VALUES ($1, $2, $3)`, ev.ID, int64(1)<<40, ev.Offset)
				return err
			},
		},
		{
			// A data error is the event's fault, even if the handler calls
			// it a dependency outage: retrying the batch can't fix it.
			name: "constraint violation marked Unavailable",
			bad: func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, part, off) VALUES (NULL, $1, $2)`, ev.Partition, ev.Offset)
				return consumer.Unavailable(err)
			},
		},
		{
			// The handler returns with its rows unread and unclosed: the
			// connection stays busy.
			name: "query result left open",
			bad: func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				if err := effectWithArgs(ctx, tx, ev); err != nil {
					return err
				}
				_, err := tx.Query(ctx, `SELECT g FROM generate_series(1, 3) g`)
				return err
			},
		},
		{
			// The handler ends the runtime's transaction with plain SQL.
			name: "transaction ended by the handler",
			bad: func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
				if err := effectWithArgs(ctx, tx, ev); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `ROLLBACK`)
				return err
			},
		},
	}
	// Each case runs under pgx's default exec mode (a new statement is
	// prepared before the pipeline is sent), under exec mode (nothing is
	// prepared) and under the simple protocol (no pipelining at all).
	for _, mode := range []string{"cache_statement", "exec", "simple_protocol", "cache_describe", "describe_exec"} {
		for _, tc := range cases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) { runIsolationCase(t, mode, tc.bad) })
		}
	}
}

// effectWithArgs writes the event's effect row with a statement with arguments.
func effectWithArgs(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO effect (event_id, part, off) VALUES ($1, $2, $3)`, ev.ID, ev.Partition, ev.Offset)
	return err
}

// effectLiteral writes the event's effect row with a statement without
// arguments, which pgx sends with the simple protocol.
func effectLiteral(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO effect (event_id, part, off) VALUES ('%s', %d, %d)`, ev.ID, ev.Partition, ev.Offset))
	return err
}

// runIsolationCase runs three events in one batch, the middle one with bad as
// handler, with pgx's default_query_exec_mode set to mode, and checks that
// the outer two commit with their effect and the middle one is
// dead-lettered with none.
func runIsolationCase(t *testing.T, mode string, bad consumer.Handler) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ids := []uuid.UUID{newID(t), newID(t), newID(t)}
	var msgs []kafka.Message
	for _, id := range ids {
		msgs = append(msgs, event(id, 0, ""))
	}
	e.kafka.Produce(t, e.topic, msgs...)
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		switch ev.Offset {
		case 0:
			return effectWithArgs(ctx, tx, ev)
		case 1:
			return bad(ctx, tx, ev)
		default:
			return effectLiteral(ctx, tx, ev)
		}
	}
	e.start(e.config(func(c *consumer.Config) {
		c.HandlerMaxAttempts = 2
		c.DatabaseURL = dsnWithParam(t, e.dsn, "default_query_exec_mode", mode)
	}), h)
	e.waitCaughtUp(t, 30*time.Second)
	assertEffectAndDedupRow(t, e, ids, []bool{true, false, true})
	dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 5*time.Second)
	if len(dl) != 1 || header(dl[0], consumer.HeaderDLQOriginalOffset) != "1" ||
		header(dl[0], consumer.HeaderDLQReason) != string(consumer.ReasonHandlerFailed) {
		t.Fatalf("want one handler_failed dead letter, for offset 1; got %d", len(dl))
	}
}

// dsnWithParam returns dsn with the query parameter k set to v.
func dsnWithParam(t *testing.T, dsn, k, v string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// assertEffectAndDedupRow checks, per id, that the event has one effect row and a dedup
// row when done[i], and neither otherwise.
func assertEffectAndDedupRow(t *testing.T, e *env, ids []uuid.UUID, done []bool) {
	t.Helper()
	ctx := context.Background()
	for i, id := range ids {
		var effects, dedupRows int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM effect WHERE event_id = $1`, id).Scan(&effects); err != nil {
			t.Fatal(err)
		}
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = $1`, id).Scan(&dedupRows); err != nil {
			t.Fatal(err)
		}
		want := 0
		if done[i] {
			want = 1
		}
		if effects != want || dedupRows != want {
			t.Errorf("event at offset %d: %d effect rows and %d dedup rows, want %d and %d", i, effects, dedupRows, want, want)
		}
	}
}

// TestServerTimeoutShrinksTransaction: with idle_in_transaction_session_timeout
// shorter than a batch of slow handlers (an HTTP call each, no database use),
// the runtime commits fewer records per transaction instead of repeating the
// batch forever, counts it, and logs it once.
func TestServerTimeoutShrinksTransaction(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const n = 10
	var msgs []kafka.Message
	for range n {
		msgs = append(msgs, event(newID(t), 0, ""))
	}
	e.kafka.Produce(t, e.topic, msgs...)
	var calls atomic.Int64
	h := func(ctx context.Context, _ pgx.Tx, _ *consumer.Event) error {
		calls.Add(1)
		select { // a 200 ms downstream call, with the transaction open and idle
		case <-time.After(200 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// 1000 ms, sent as a startup parameter.
	dsn := dsnWithParam(t, e.dsn, "idle_in_transaction_session_timeout", "1000")
	r := e.start(e.config(func(c *consumer.Config) { c.DatabaseURL = dsn }), h)
	e.waitCaughtUp(t, 30*time.Second)
	if got := calls.Load(); got > 3*n {
		t.Errorf("%d handler calls for %d events, want at most %d", got, n, 3*n)
	}
	body := scrape(t, r.c)
	if v := metricValue(t, body, "idempotent_consumer_transaction_timeouts_total"); v < 1 {
		t.Errorf("idempotent_consumer_transaction_timeouts_total = %d, want >= 1", v)
	}
	const logged = "the database ended the batch transaction"
	if k := strings.Count(e.logBuf.String(), logged); k != 1 {
		t.Errorf("%q logged %d times, want once", logged, k)
	}
	t.Logf("%d handler calls for %d events", calls.Load(), n)
}

// TestCommitRefusedByDeferredConstraint: a handler's write that breaks a
// deferred foreign key passes its statement and fails only at COMMIT. The
// runtime splits the transaction until the event is alone and dead-letters
// it, instead of retrying the batch forever; its neighbours commit.
func TestCommitRefusedByDeferredConstraint(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ctx := context.Background()
	ids := deferredChildFixture(t, e)
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		parent := 1
		if ev.Offset == 2 {
			parent = 999 // no such parent: refused at COMMIT
		}
		_, err := tx.Exec(ctx, `INSERT INTO child (event_id, parent_id) VALUES ($1, $2)`, ev.ID, parent)
		return err
	}
	e.start(e.config(), h)
	e.waitCaughtUp(t, 30*time.Second)
	for i, id := range ids {
		var rows, dedupRows int
		if err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM child WHERE event_id = $1),
			(SELECT count(*) FROM processed_event WHERE event_id = $1)`, id).Scan(&rows, &dedupRows); err != nil {
			t.Fatal(err)
		}
		want := 1
		if i == 2 {
			want = 0
		}
		if rows != want || dedupRows != want {
			t.Errorf("event at offset %d: %d rows and %d dedup rows, want %d and %d", i, rows, dedupRows, want, want)
		}
	}
	dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 5*time.Second)
	if len(dl) != 1 || header(dl[0], consumer.HeaderDLQOriginalOffset) != "2" ||
		!strings.Contains(header(dl[0], consumer.HeaderDLQError), "23503") {
		t.Fatalf("want one dead letter for offset 2 naming the foreign key violation; got %d", len(dl))
	}
}

// deferredChildFixture creates table child whose parent_id references
// parent (holding only id 1) through a deferred foreign key, so a bad row
// passes its INSERT and is refused at COMMIT, and produces four events to
// partition 0. It returns their ids in offset order.
func deferredChildFixture(t *testing.T, e *env) []uuid.UUID {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), `CREATE TABLE parent (id int PRIMARY KEY);
		INSERT INTO parent VALUES (1);
		CREATE TABLE child (event_id uuid NOT NULL, parent_id int NOT NULL
			REFERENCES parent DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	ids := []uuid.UUID{newID(t), newID(t), newID(t), newID(t)}
	msgs := make([]kafka.Message, len(ids))
	for i, id := range ids {
		msgs[i] = event(id, 0, "")
	}
	e.kafka.Produce(t, e.topic, msgs...)
	return ids
}
