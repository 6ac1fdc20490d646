package outbox_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idempotency-dev/operator/consumer/outbox"
)

// topicsOutbox is an outbox publishing to topics, with its partitions.
func topicsOutbox(t *testing.T, topics ...string) *relayEnv {
	t.Helper()
	e := newRelayEnv(t)
	if err := outbox.Ensure(testCtx(t), e.pool, e.tbl, testOwner, outbox.WithTopics(topics)); err != nil {
		t.Fatal(err)
	}
	return e
}

func isTopicRefusal(err error, topic string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22023" && strings.Contains(pe.Message, topic)
}

// TestTopicCheck_PlainInsertRefused: a plain INSERT (emitters may insert the
// event's columns) of a topic the outbox does not publish to is refused
// like an emit; one it publishes to goes in. (Before, only the emit
// function checked: a plain insert of any topic went in and held the
// relay's stream.)
func TestTopicCheck_PlainInsertRefused(t *testing.T) {
	e := topicsOutbox(t, "orders")
	ctx := testCtx(t)
	insert := func(topic string) error {
		_, err := e.pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{"public", "outbox"}.Sanitize()+` (event_id, topic, key, payload, headers)
VALUES ($1, $2, NULL, '\x7b7d', '{}')`, uuid.Must(uuid.NewV7()), topic)
		return err
	}
	if err := insert("ordres"); !isTopicRefusal(err, "ordres") {
		t.Errorf("a plain insert to another topic: %v, want SQLSTATE 22023 naming it", err)
	}
	if err := insert("orders"); err != nil {
		t.Errorf("a plain insert to the outbox's topic: %v", err)
	}
}

// TestTopicCheck_AnOpenTransactionSeesTheChange: a session that ran the
// emit function before, in a transaction already open (with no id yet)
// when a topic is removed, is refused that topic at its next emit.
// (Before, it still ran the former function, which allowed it: its catalog
// was not read again until it took a new lock.)
func TestTopicCheck_AnOpenTransactionSeesTheChange(t *testing.T) {
	e := topicsOutbox(t, "keep", "gone")
	ctx := testCtx(t)
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	emit := func(tx pgx.Tx, topic string) error {
		_, err := outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: topic, Key: []byte("k"), Payload: []byte(`{}`)})
		return err
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return emit(tx, "gone") }); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Ensure(ctx, e.pool, e.tbl, testOwner, outbox.WithTopics([]string{"keep"})); err != nil {
		t.Fatal(err)
	}
	if err := emit(tx, "gone"); !isTopicRefusal(err, "gone") {
		t.Errorf("an emit to the removed topic in a transaction open before the change: %v, want SQLSTATE 22023", err)
	}
}

// emitOpen emits msg in a transaction it leaves open (rolled back when the
// test ends unless committed).
func (e *relayEnv) emitOpen(t *testing.T, msg outbox.Message) pgx.Tx {
	t.Helper()
	ctx := testCtx(t)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := outbox.Emit(ctx, tx, e.tbl, msg); err != nil {
		t.Fatal(err)
	}
	return tx
}

// settled asks TopicsSettled on a connection of e's pool.
func (e *relayEnv) settled(t *testing.T) bool {
	t.Helper()
	ctx := testCtx(t)
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	ok, err := outbox.TopicsSettled(ctx, c.Conn(), e.tbl)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestTopicCheck_AChangeWaitsForNoEmitter: a change of the list returns at
// once while a transaction that inserted is open (Ensure blocks no emit and
// fails for none; a review found the first version's SHARE lock failing
// every change under overlapping long transactions, and partition upkeep
// with it); it is pending until that transaction ends.
func TestTopicCheck_AChangeWaitsForNoEmitter(t *testing.T) {
	e := topicsOutbox(t, "keep", "gone")
	ctx := testCtx(t)
	if !e.settled(t) {
		t.Fatal("a new outbox's topic check is not settled")
	}
	holder := e.emitOpen(t, outbox.Message{Topic: "keep", Payload: []byte(`{}`)})
	start := time.Now()
	if err := outbox.Ensure(ctx, e.pool, e.tbl, testOwner, outbox.WithTopics([]string{"keep"})); err != nil {
		t.Fatalf("Ensure with an emitter's transaction open: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Ensure took %s with an emitter's transaction open, want no wait for it", d)
	}
	if e.settled(t) {
		t.Error("the change settled while a transaction that inserted before it is open")
	}
	if err := outbox.Ensure(ctx, e.pool, e.tbl, testOwner, outbox.WithTopics([]string{"keep"})); err != nil || e.settled(t) {
		t.Errorf("Ensure again (no change): %v; settled %v, want still pending", err, e.settled(t))
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.settled(t) {
		t.Error("the change is not settled once the transaction ended")
	}
}

// TestTopicCheck_ArmedAlways: a trigger someone disabled is armed again by
// Ensure, and session_replication_role = replica (a replication worker, a
// restore without triggers) does not skip it.
func TestTopicCheck_ArmedAlways(t *testing.T) {
	e := topicsOutbox(t, "keep")
	ctx := testCtx(t)
	if _, err := e.pool.Exec(ctx, `ALTER TABLE public.outbox DISABLE TRIGGER idempotency_outbox_topics`); err != nil {
		t.Fatal(err)
	}
	if e.settled(t) {
		t.Error("settled with the trigger disabled")
	}
	if err := outbox.Ensure(ctx, e.pool, e.tbl, testOwner, outbox.WithTopics([]string{"keep"})); err != nil {
		t.Fatal(err)
	}
	if !e.settled(t) {
		t.Error("not settled once Ensure armed the trigger again")
	}
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO public.outbox (event_id, topic, payload) VALUES ($1, 'gone', '\x7b7d')`, uuid.Must(uuid.NewV7()))
		return err
	})
	if !isTopicRefusal(err, "gone") {
		t.Errorf("an insert with session_replication_role = replica: %v, want the topic refusal", err)
	}
}

// TestTopicCheck_HorizonCoversEveryRowOfARemovedTopic: what a retired
// topic relies on. An emit that passed the former function's topic check
// and waits for its key's lock behind an open transaction, while the topic
// is removed, either is refused or commits below a transaction id taken
// once the change has settled (Horizon). (A review found the first
// version's horizon, taken without waiting for such transactions, below
// such a row.)
func TestTopicCheck_HorizonCoversEveryRowOfARemovedTopic(t *testing.T) {
	e := topicsOutbox(t, "keep", "gone")
	ctx := testCtx(t)
	msg := outbox.Message{Topic: "gone", Key: []byte("k"), Payload: []byte(`{}`)}
	holder := e.emitOpen(t, msg)
	writer, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx)
	written := make(chan error, 1)
	go func() {
		_, err := outbox.Emit(ctx, writer, e.tbl, msg) // waits for the key's lock
		written <- err
	}()
	waitFor(t, 10*time.Second, "the writer waiting for the key's lock", func() bool {
		var n int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n >= 1
	})
	if err := outbox.Ensure(ctx, e.pool, e.tbl, testOwner, outbox.WithTopics([]string{"keep"})); err != nil {
		t.Fatal(err)
	}
	if e.settled(t) {
		t.Fatal("settled with the holder open")
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		if !isTopicRefusal(err, "gone") {
			t.Fatalf("the waiting emit: %v, want success or the topic refusal", err)
		}
		t.Log("the waiting emit was refused")
	} else if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the change settled", func() bool { return e.settled(t) })
	until, err := outbox.Horizon(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	var above int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM public.outbox WHERE topic = 'gone' AND tx >= $1::text::xid8`, strconv.FormatUint(until, 10)).Scan(&above); err != nil {
		t.Fatal(err)
	}
	if above != 0 {
		t.Errorf("%d row(s) for the removed topic from a transaction at or above the horizon %d", above, until)
	}
}

// setTopicsComment sets the topic check function's comment as a change in
// progress would.
func (e *relayEnv) setTopicsComment(t *testing.T, comment string) {
	t.Helper()
	if _, err := e.pool.Exec(testCtx(t), `COMMENT ON FUNCTION public.outbox_topics() IS '`+comment+`'`); err != nil {
		t.Fatal(err)
	}
}

// TestTopicCheck_AnInterruptedChangeIsPending: a change whose list of
// older transactions was never written (Ensure cut off after the function
// was replaced) is pending, not settled: TopicsSettled reads the list then.
// (A review found it settled: the next Ensure saw the same source and
// wrote nothing, and a session that still ran the former check inserted
// above the horizon.)
func TestTopicCheck_AnInterruptedChangeIsPending(t *testing.T) {
	e := topicsOutbox(t, "keep", "gone")
	ctx := testCtx(t)
	holder := e.emitOpen(t, outbox.Message{Topic: "keep", Payload: []byte(`{}`)})
	if err := outbox.Ensure(ctx, e.pool, e.tbl, testOwner, outbox.WithTopics([]string{"keep"})); err != nil {
		t.Fatal(err)
	}
	e.setTopicsComment(t, "idempotency.dev/topics-pending-on=?") // as if cut off before the list
	for i := range 2 {                                           // the first call reads the list, the second uses it
		if e.settled(t) {
			t.Errorf("call %d: an interrupted change settled with a transaction from before it open", i+1)
		}
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.settled(t) {
		t.Error("not settled once the transaction ended")
	}
}

// TestTopicCheck_NoTransactionIsNotWaitedFor: a virtual xid "N/0" (a
// session in no transaction: one whose commit was caught before its locks
// went, or one holding a session lock, as the relay's ownership lock) is
// never waited for. (A review found one recorded and waited for for good
// once that backend held an idle session lock.)
func TestTopicCheck_NoTransactionIsNotWaitedFor(t *testing.T) {
	e := topicsOutbox(t, "keep")
	ctx := testCtx(t)
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	var pid int
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock(4242)) l`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var vxid string // read from another session, the holder idle
	if err := e.pool.QueryRow(ctx, `SELECT virtualtransaction FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 LIMIT 1`, pid).Scan(&vxid); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Exec(ctx, `SELECT pg_advisory_unlock(4242)`) }()
	if !strings.HasSuffix(vxid, "/0") {
		t.Fatalf("an idle session lock's virtual xid %q, want N/0", vxid)
	}
	e.setTopicsComment(t, "idempotency.dev/topics-pending-on="+vxid)
	if !e.settled(t) {
		t.Errorf("waiting for %s, a session in no transaction", vxid)
	}
}
