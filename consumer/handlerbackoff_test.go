package consumer_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestHandlerBackoff_NoTransactionOpen: the server ends a transaction idle
// for 300 ms (set on the database, so the runtime cannot see it), and the
// handler of the middle event fails every time, with 0.5 to 1 s between
// attempts. The pauses are taken with no transaction open, so the event uses
// its three attempts and is dead-lettered, the events around it take effect
// once, and a later record goes through. Before, the runtime slept inside
// the batch transaction: the server ended it, the runtime took that for a
// slow handler, shrank the batch and started the attempts over on every
// redo, and the partition never moved again.
func TestHandlerBackoff_NoTransactionOpen(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = 300', current_database());
	END $$`); err != nil {
		t.Fatal(err)
	}
	ids := []uuid.UUID{newID(t), newID(t), newID(t)}
	e.kafka.Produce(t, e.topic, event(ids[0], 0, ""), event(ids[1], 0, ""), event(ids[2], 0, ""))
	var failing atomic.Int64
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		if ev.ID == ids[1] {
			failing.Add(1)
			return errors.New("downstream refused")
		}
		return e.handler(ctx, tx, ev)
	}
	const attempts = 3
	e.start(e.config(func(c *consumer.Config) {
		c.IdleInTransactionTimeout = -1 // the database's 300 ms
		c.HandlerMaxAttempts = attempts
		c.HandlerBackoff = time.Second
		c.HandlerBackoffMax = time.Second
	}), h)
	e.waitCaughtUp(t, 20*time.Second)
	if got := failing.Load(); got != attempts {
		t.Errorf("the failing handler was called %d times, want %d", got, attempts)
	}
	assertEffectAndDedupRow(t, e, ids, []bool{true, false, true})
	dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 5*time.Second)
	if len(dl) != 1 || header(dl[0], consumer.HeaderDLQOriginalOffset) != "1" ||
		header(dl[0], consumer.HeaderDLQReason) != string(consumer.ReasonHandlerFailed) ||
		header(dl[0], consumer.HeaderDLQAttempts) != strconv.Itoa(attempts) {
		t.Fatalf("want one handler_failed dead letter for offset 1 after %d attempts; got %d", attempts, len(dl))
	}

	// A later record goes through: the partition is not stalled.
	later := newID(t)
	e.kafka.Produce(t, e.topic, event(later, 0, ""))
	e.waitCaughtUp(t, 10*time.Second)
	assertEffectAndDedupRow(t, e, []uuid.UUID{later}, []bool{true})
}

// TestHandlerBackoff_AttemptsKeptAcrossTransactions: a handler that fails
// twice and then succeeds, with other events before and after it in the
// batch, takes effect once, and so does every other event; the pauses
// between its attempts cost the events before it one more run, not one per
// attempt.
func TestHandlerBackoff_AttemptsKeptAcrossTransactions(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const n = 6
	ids := make([]uuid.UUID, n)
	var msgs []kafka.Message
	for i := range ids {
		ids[i] = newID(t)
		msgs = append(msgs, event(ids[i], 0, ""))
	}
	e.kafka.Produce(t, e.topic, msgs...)
	var flaky, others atomic.Int64
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		if ev.ID == ids[3] {
			if flaky.Add(1) <= 2 {
				return errors.New("not yet")
			}
		} else {
			others.Add(1)
		}
		return e.handler(ctx, tx, ev)
	}
	e.start(e.config(func(c *consumer.Config) {
		c.HandlerMaxAttempts = 3
		c.HandlerBackoff = 50 * time.Millisecond
		c.HandlerBackoffMax = 100 * time.Millisecond
	}), h)
	e.waitCaughtUp(t, 20*time.Second)
	done := make([]bool, n)
	for i := range done {
		done[i] = true
	}
	assertEffectAndDedupRow(t, e, ids, done)
	if got := flaky.Load(); got != 3 {
		t.Errorf("the flaky handler was called %d times, want 3", got)
	}
	// Offsets 0-2 run once in the transaction rolled back at the first
	// failure and once more in their own; 4 and 5 run once.
	if got := others.Load(); got > 2*3+2 {
		t.Errorf("the other handlers were called %d times, want at most %d", got, 2*3+2)
	}
}

// TestHandlerBackoff_MustFitShutdownTimeout: a pause between attempts that
// cannot fit in the shutdown grace period is refused, with the rule in the
// error.
func TestHandlerBackoff_MustFitShutdownTimeout(t *testing.T) {
	c := validConfig()
	c.HandlerBackoffMax = 10 * time.Second
	c.ShutdownTimeout = 10 * time.Second
	err := c.Validate()
	var ce *consumer.ConfigError
	if !errors.As(err, &ce) || ce.Field != "HandlerBackoffMax" ||
		!strings.Contains(err.Error(), "shorter than ShutdownTimeout") || !strings.Contains(err.Error(), "fit") {
		t.Fatalf("Validate: %v; want a HandlerBackoffMax error stating the rule", err)
	}
	c.ShutdownTimeout = 11 * time.Second
	if err := c.Validate(); err != nil {
		t.Fatalf("a pause shorter than the shutdown timeout refused: %v", err)
	}
}

// pausingAtShutdown starts a consumer whose handler fails the first call
// of one event, so that its partition pauses 2s, longer than the 1s
// session timeout, before the next attempt; it returns once that first
// call failed, with the event's id.
func pausingAtShutdown(t *testing.T, e *env) (*running, uuid.UUID) {
	t.Helper()
	id := newID(t)
	e.kafka.Produce(t, e.topic, event(id, 0, ""))
	var calls atomic.Int64
	failed := make(chan struct{})
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		if calls.Add(1) == 1 {
			close(failed)
			return errors.New("not yet")
		}
		return e.handler(ctx, tx, ev)
	}
	r := e.start(e.config(func(c *consumer.Config) {
		c.HandlerBackoff = 2 * time.Second
		c.HandlerBackoffMax = 2 * time.Second
		c.ShutdownTimeout = 5 * time.Second
		c.SessionTimeout = time.Second
		c.HeartbeatInterval = 200 * time.Millisecond
	}), h)
	select {
	case <-failed:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler was not called")
	}
	return r, id
}

// assertCommittedPast checks the event took effect once and the offset
// was committed past it.
func assertCommittedPast(t *testing.T, e *env, id uuid.UUID) {
	t.Helper()
	assertEffectAndDedupRow(t, e, []uuid.UUID{id}, []bool{true})
	co, err := e.committed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if co[0] != 1 {
		t.Errorf("committed offset %d, want 1 (the shutdown's commit was refused; see the log)", co[0])
	}
}

// TestHandlerBackoff_ShutdownWaitsPauseOut: a shutdown that finds the
// partition pausing between a handler's attempts lets the batch wait the
// pause out and finish within ShutdownTimeout: the event takes effect and
// the offset is committed past it, instead of the batch being abandoned.
// The pause is longer than the session timeout: the member keeps
// heartbeating while its partitions drain, so the commit is still its
// generation's (third_party/kafka-go/PATCH.md, DrainTimeout).
func TestHandlerBackoff_ShutdownWaitsPauseOut(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	r, id := pausingAtShutdown(t, e)
	stopWithin(t, r, 10*time.Second)
	assertCommittedPast(t, e, id)
}

// TestHandlerBackoff_ShutdownDuringARebalanceWaitsPauseOut: as
// TestHandlerBackoff_ShutdownWaitsPauseOut, but another member joins while
// the shutdown drains (a rolling restart). The coordinator answers the
// heartbeats with RebalanceInProgress yet renews the session and accepts
// the generation's commits: the member keeps beating until its partition
// has drained, so the commit lands and the newcomer starts after it.
func TestHandlerBackoff_ShutdownDuringARebalanceWaitsPauseOut(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	r, id := pausingAtShutdown(t, e)
	r.cancel()
	time.Sleep(200 * time.Millisecond)
	// A new member joins; it never commits anything.
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: e.group, Brokers: e.kafka.Brokers(), Topics: []string{e.topic},
		SessionTimeout: 5 * time.Second, HeartbeatInterval: 200 * time.Millisecond, RebalanceTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cg.Close() }()
	go func() {
		for {
			if _, err := cg.Next(context.Background()); err != nil {
				return
			}
		}
	}()
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	assertCommittedPast(t, e, id)
}
