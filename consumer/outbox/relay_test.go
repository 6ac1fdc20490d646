package outbox_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRelay_PublishesARowCommittedAfterALaterIdRow: A emits first (the
// smaller eventId) and stays open; B emits and commits. A relay that
// published "ids after the last one" would send B and then never A. The
// relay sends both, with Kafka key, eventId and the user's headers, and the
// outbox has no dead tuple afterwards.
func TestRelay_PublishesARowCommittedAfterALaterIdRow(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	r := e.start(t, nil)
	waitFor(t, 10*time.Second, "the relay to own the stream", r.owner)

	a, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Rollback(ctx) }()
	idA, err := outbox.Emit(ctx, a, e.tbl, outbox.Message{Topic: "orders", Key: []byte("a"), Payload: []byte("A"), Headers: map[string]string{"type": "A"}})
	if err != nil {
		t.Fatal(err)
	}
	idB := e.emit(t, "orders", "b", []byte("B"))
	if idB.String() <= idA.String() {
		t.Fatalf("B's id %s is not after A's %s", idB, idA)
	}
	time.Sleep(500 * time.Millisecond) // several polls while A is open
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := e.readTopic(t, "orders", 1, 2, 20*time.Second)
	seen := map[string]string{}
	for _, rec := range got {
		seen[rec.id] = rec.key
	}
	if seen[idA.String()] != "a" || seen[idB.String()] != "b" {
		t.Fatalf("published %v, want %s (key a) and %s (key b)", got, idA, idB)
	}
	waitFor(t, 10*time.Second, "published_total 2", func() bool { return testutil.ToFloat64(r.metrics.Published) == 2 })
	waitFor(t, 10*time.Second, "backlog 0", func() bool { return testutil.ToFloat64(r.metrics.Backlog) == 0 })
	assertNoDeadTuples(t, e)
}

// assertNoDeadTuples: nothing updates or deletes outbox rows.
func assertNoDeadTuples(t *testing.T, e *relayEnv) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := e.pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	var dead, live int64
	err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup), 0) FROM pg_stat_user_tables
  WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'public.outbox'::regclass)`).Scan(&dead, &live)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outbox partitions: n_live_tup=%d n_dead_tup=%d", live, dead)
	if dead != 0 {
		t.Errorf("n_dead_tup of the outbox's partitions = %d, want 0", dead)
	}
}

// TestRelay_KeepsKeyOrderWhenTheNewerXidCommitsFirst: X takes its
// transaction id first, then T (which holds the horizon), then Y. Y emits on
// key k and commits; X emits on k (after Y, so a larger eventId) and
// commits. The horizon (T) lets X's row into a window but not Y's: the relay
// must still send Y before X, because Y committed first. Y is sent again
// when its own window opens: a duplicate with the same eventId, after X.
func TestRelay_KeepsKeyOrderWhenTheNewerXidCommitsFirst(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	r := e.start(t, nil)
	waitFor(t, 10*time.Second, "the relay to own the stream", r.owner)

	begin := func() (pgx.Tx, string) {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		var xid string
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		return tx, xid
	}
	x, xX := begin()
	hold, xT := begin()
	y, xY := begin()
	t.Logf("xids: X %s < T %s < Y %s", xX, xT, xY)
	emit := func(tx pgx.Tx, payload string) uuid.UUID {
		id, err := outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return id
	}
	idY := emit(y, "Y")
	idX := emit(x, "X")
	if idX.String() <= idY.String() {
		t.Fatalf("X's id %s is not after Y's %s", idX, idY)
	}
	first := e.readTopic(t, "orders", 1, 2, 20*time.Second)
	ids := func(rs []record) []string {
		var s []string
		for _, r := range rs {
			name := map[string]string{idX.String(): "X", idY.String(): "Y"}[r.id]
			s = append(s, name)
		}
		return s
	}
	if got := fmt.Sprint(ids(first)); got != "[Y X]" {
		t.Fatalf("published while T holds the horizon: %s, want [Y X] (Y committed first)", got)
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	all := e.readTopic(t, "orders", 1, 3, 20*time.Second)
	if got := fmt.Sprint(ids(all)); got != "[Y X Y]" {
		t.Fatalf("published after T ended: %s, want [Y X Y] (Y again in its own window: a duplicate)", got)
	}
}

// TestRelay_TwoRelaysNeverPublishAtOnce: two relays on one outbox; the
// owner's session is killed twice while events keep coming. The other one
// takes over; no publish of one relay overlaps in time a publish of the
// other (the takeover delay outlasts a former owner's last publish), and
// every event is published.
func TestRelay_TwoRelaysNeverPublishAtOnce(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 3)
	type span struct {
		relay      int
		start, end time.Time
		n          int
	}
	var (
		mu    sync.Mutex
		spans []span
	)
	for i := range 2 {
		e.start(t, func(c *outbox.Config) {
			c.OnPublish = func(start, end time.Time, n int) {
				mu.Lock()
				spans = append(spans, span{i, start, end, n})
				mu.Unlock()
			}
		})
	}
	const events = 500
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range events {
			e.emit(t, "orders", fmt.Sprintf("key-%d", i%17), []byte(fmt.Sprint(i)))
			time.Sleep(20 * time.Millisecond)
		}
	}()
	ownerIndex := func() int {
		for i, r := range e.relays {
			if r.owner() {
				return i
			}
		}
		return -1
	}
	var owners []int
	for kill := range 2 {
		waitFor(t, 20*time.Second, "an owner", func() bool { return ownerIndex() >= 0 })
		owner := ownerIndex()
		owners = append(owners, owner)
		before := testutil.ToFloat64(e.relays[owner].metrics.Published)
		waitFor(t, 20*time.Second, "the owner to publish", func() bool { return testutil.ToFloat64(e.relays[owner].metrics.Published) > before+10 })
		var pids []int32
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT l.pid FROM pg_locks l, public.outbox_relay c
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.classid = ((c.lock_key >> 32) & 4294967295)::oid AND l.objid = (c.lock_key & 4294967295)::oid`)
			if err != nil {
				return err
			}
			pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
			return err
		})
		if err != nil || len(pids) != 1 {
			t.Fatalf("kill %d: lock holders %v (err %v), want one", kill, pids, err)
		}
		if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pids[0]); err != nil {
			t.Fatal(err)
		}
		t.Logf("kill %d: terminated relay %d's session (pid %d)", kill, owner, pids[0])
		waitFor(t, 20*time.Second, "the other relay to take over", func() bool {
			i := ownerIndex()
			return i >= 0 && i != owner
		})
	}
	<-done
	got, firsts := e.readDistinct(t, "orders", 3, events)
	if len(firsts) != events {
		t.Fatalf("published %d distinct events (%d records), want %d", len(firsts), len(got), events)
	}
	// Per key, the first publication of each event comes in commit order
	// (the events of a key were emitted one after the other, so in id
	// order).
	firstSeen, last := map[string]bool{}, map[string]string{}
	for _, r := range got {
		if firstSeen[r.id] {
			continue
		}
		firstSeen[r.id] = true
		if r.id < last[r.key] {
			t.Errorf("key %s: %s published (first) after %s", r.key, r.id, last[r.key])
		}
		last[r.key] = r.id
	}
	mu.Lock()
	defer mu.Unlock()
	published := map[int]int{}
	for i, a := range spans {
		published[a.relay] += a.n
		for _, b := range spans[i+1:] {
			if a.relay != b.relay && a.start.Before(b.end) && b.start.Before(a.end) {
				t.Errorf("relay %d published [%s, %s] while relay %d published [%s, %s]", a.relay, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"),
					b.relay, b.start.Format("15:04:05.000"), b.end.Format("15:04:05.000"))
			}
		}
	}
	t.Logf("owners before each kill %v; records published per relay %v (%d records for %d events: repeats after a takeover); %d publishes", owners, published, len(got), events, len(spans))
	if published[0] == 0 || published[1] == 0 {
		t.Errorf("records per relay %v: both relays should have owned the stream", published)
	}
	assertNoDeadTuples(t, e)
}

// TestRelay_WakesOnNotify: with a poll interval of a minute, an event is
// still published within seconds of its commit (milliseconds on an idle
// machine): the emit function's NOTIFY wakes the relay.
func TestRelay_WakesOnNotify(t *testing.T) {
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	r := e.start(t, func(c *outbox.Config) { c.PollInterval = time.Minute })
	waitFor(t, 30*time.Second, "the relay owning the stream", r.owner)
	// A first event, published once the takeover delay (2.1s) is over and
	// the relay listens, however long its start took on a loaded machine.
	e.emit(t, "orders", "k", []byte("warm-up"))
	waitFor(t, 90*time.Second, "the first event published", func() bool { return testutil.ToFloat64(r.metrics.Published) == 1 })
	for i := range 3 {
		start := time.Now()
		e.emit(t, "orders", "k", []byte("ping"))
		waitFor(t, 10*time.Second, "the event published", func() bool { return testutil.ToFloat64(r.metrics.Published) == float64(i+2) })
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("event %d published %s after its commit, want well under the poll interval", i, d)
		} else {
			t.Logf("event %d published %s after its commit", i, d)
		}
	}
}

// TestRelay_CountsTheBacklogOnlyEveryMetricsInterval (review finding L3):
// the backlog count reads every row at or above the cursor; an idle relay
// (here held by an open transaction's horizon, with a committed row behind
// it) must not run it on every poll, only every MetricsInterval.
func TestRelay_CountsTheBacklogOnlyEveryMetricsInterval(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	gate, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Rollback(ctx) }()
	if _, err := outbox.Emit(ctx, gate, e.tbl, outbox.Message{Topic: "orders", Key: []byte("g"), Payload: []byte("gate")}); err != nil {
		t.Fatal(err)
	}
	e.emit(t, "orders", "k", []byte("behind the gate"))
	r := e.start(t, func(c *outbox.Config) { c.MetricsInterval = time.Hour; c.PollInterval = 20 * time.Millisecond })
	waitFor(t, 20*time.Second, "the backlog counted", func() bool { return testutil.ToFloat64(r.metrics.Backlog) == 1 })
	age := testutil.ToFloat64(r.metrics.OldestAge)
	time.Sleep(time.Second) // some 50 polls
	if got := testutil.ToFloat64(r.metrics.OldestAge); got != age {
		t.Fatalf("the oldest unpublished age went from %v to %v within a second: the backlog was counted again, not once per MetricsInterval (1h)", age, got)
	}
}

// TestRelay_GaugesWhileFailingAndAfterOwnershipIsLost: the oldest
// unpublished age keeps growing while a row cannot be published (the
// IdempotentOutboxBehind alert reads it), and a relay that lost the
// stream stops reporting the backlog it counted as the owner (a standby's
// stale figures would keep the alert firing, or hide the new owner's).
func TestRelay_GaugesWhileFailingAndAfterOwnershipIsLost(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	r := e.start(t, func(c *outbox.Config) { c.MetricsInterval = 200 * time.Millisecond })
	waitFor(t, 10*time.Second, "the relay to own the stream", r.owner)
	e.emit(t, "missing", "k", []byte("to a topic that does not exist"))
	failures := func() float64 {
		return testutil.ToFloat64(r.metrics.Failures.WithLabelValues(outbox.ReasonUnknownTopic))
	}
	waitFor(t, 20*time.Second, "an unknown_topic failure", func() bool { return failures() >= 1 })
	waitFor(t, 20*time.Second, "the backlog counted while failing", func() bool {
		return testutil.ToFloat64(r.metrics.Backlog) == 1 && testutil.ToFloat64(r.metrics.OldestAge) > 0
	})
	age := testutil.ToFloat64(r.metrics.OldestAge)
	waitFor(t, 20*time.Second, "the oldest unpublished age to grow while publishing fails", func() bool {
		return testutil.ToFloat64(r.metrics.OldestAge) >= age+1
	})

	// Another session takes the lock while this relay's session is cut:
	// the relay is a standby now.
	holder, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	var key int64
	if err := holder.QueryRow(ctx, `SELECT lock_key FROM public.outbox_relay`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend(l.pid) FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.classid = (($1::bigint >> 32) & 4294967295)::oid AND l.objid = ($1::bigint & 4294967295)::oid`, key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the lock taken by the test's session", func() bool {
		var got bool
		return holder.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got) == nil && got
	})
	defer func() { _, _ = holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`) }()
	waitFor(t, 10*time.Second, "the relay to report it is not the owner", func() bool { return !r.owner() })
	if b, a := testutil.ToFloat64(r.metrics.Backlog), testutil.ToFloat64(r.metrics.OldestAge); b != 0 || a != 0 {
		t.Fatalf("a relay that is not the owner reports backlog %v, oldest unpublished age %v; want 0 and 0", b, a)
	}
}

// TestRelay_BoundsTheRowsReadAheadOfAPage (review finding 2): a key with
// many events committed while an older transaction X was open, X emitting
// on the key last, and a transaction H between them still open (the
// horizon): X's window closes at H, and the key's newer rows, beyond H, are
// read ahead of X's row. They were all one batch (a million of them: one
// call that could not be acknowledged within a publish timeout, retried for
// ever). They go out in batches of at most BatchSize, in event_id order,
// and X's row after them all.
func TestRelay_BoundsTheRowsReadAheadOfAPage(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 2)
	txX := e.beginWithXid(t)
	e.beginWithXid(t) // H: holds the horizon until the test ends
	const newer, batch = 1000, 50
	for i := range newer / 100 {
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			for j := range 100 {
				if _, err := outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte(fmt.Sprint(i*100 + j))}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	last, err := outbox.Emit(ctx, txX, e.tbl, outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("X")})
	if err != nil {
		t.Fatal(err)
	}
	if err := txX.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	largest := e.startWithBatchSize(t, batch)
	// First publications of the key in event_id order, the older
	// transaction's last.
	_, firsts := e.readDistinct(t, "orders", 2, newer+1)
	if len(firsts) != newer+1 {
		t.Fatalf("%d distinct events published, want %d", len(firsts), newer+1)
	}
	if !slices.IsSorted(firsts) || firsts[newer] != last.String() {
		t.Errorf("first publications of key k out of event_id order (last %s, want %s)", firsts[newer], last)
	}
	if maxN := largest(); maxN > 2*batch {
		t.Errorf("one publish had %d records; BatchSize %d bounds a page and the rows read ahead of it to %d", maxN, batch, 2*batch)
	}
}

// TestRelay_ABacklogLargerThanAStatementCanReadAtOnce (review finding 1):
// after an outage the next window was the whole backlog, and opening it
// (every event_id of it) and counting it took longer than the owner's
// statement deadline: each owner's session ended there, for ever, with the
// backlog gauges at 0. Those two statements have a deadline of their own
// (at least 10 minutes), the count stops at a million rows, and the relay
// publishes.
func TestRelay_ABacklogLargerThanAStatementCanReadAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a backlog of 1M rows: skipped with -short")
	}
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 4)
	// 1M rows in 1,000 transactions, as services would have emitted them
	// while the relay was down.
	if _, err := e.pool.Exec(ctx, `DO $$
BEGIN
  FOR t IN 0..999 LOOP
    INSERT INTO public.outbox (event_id, topic, key, payload)
    SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp())*1000)::bigint - 1000), 12, '0') || '7' || lpad(to_hex(i / 1000000), 3, '0') || '8' || lpad(to_hex(i), 15, '0'))::uuid,
           'orders', convert_to('k' || (i % 100), 'UTF8'), convert_to('{"n":' || i || '}', 'UTF8')
      FROM generate_series(t * 1000, t * 1000 + 999) i;
    COMMIT;
  END LOOP;
END $$`, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE public.outbox`); err != nil {
		t.Fatal(err)
	}
	// Every statement of the owner has this deadline; reading 1M event ids
	// (or counting 1M rows) takes longer on this machine.
	r := e.start(t, func(c *outbox.Config) {
		c.PublishTimeout, c.StallTimeout = 100*time.Millisecond, 200*time.Millisecond
		c.MetricsInterval = 200 * time.Millisecond
	})
	// Before: no row published in 30 s, every session ended at "reading
	// the window ...: timeout". (A page or a publish that misses its short
	// deadline on a loaded machine only costs a retry.)
	waitFor(t, 60*time.Second, "20,000 rows published, with the backlog counted", func() bool {
		return testutil.ToFloat64(r.metrics.Published) >= 20000 && testutil.ToFloat64(r.metrics.Backlog) > 0
	})
	t.Logf("database failures (sessions ended): %v", testutil.ToFloat64(r.metrics.Failures.WithLabelValues(outbox.ReasonDatabase)))
	if b := testutil.ToFloat64(r.metrics.Backlog); b > 1000000 {
		t.Errorf("backlog gauge %v: counted beyond a million rows", b)
	}
}

// TestRelay_KeepsKeyOrderWhenRowsAheadFallBetweenPageRows (second review,
// finding 1): X1 and X2 are older transactions than H (open: the horizon),
// X1 emits p1 on key k and commits, newer transactions emit a1..an on k,
// then X2 emits p2 on k. The window [.., H) holds p1 and p2, and a1..an
// (beyond H) are read ahead of p2, with p1 < a1 < ... < an < p2. Handing
// the rows ahead over in batches of their own put them before p1; each
// batch is now a prefix, in event_id order, of the page and the rows
// ahead: p1 first.
func TestRelay_KeepsKeyOrderWhenRowsAheadFallBetweenPageRows(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 2)
	x1, x2 := e.beginWithXid(t), e.beginWithXid(t)
	e.beginWithXid(t) // H: holds the horizon until the test ends
	emit := func(tx pgx.Tx, payload string) uuid.UUID {
		t.Helper()
		id, err := outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	p1 := emit(x1, "p1")
	if err := x1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	const newer, batch = 120, 10
	for i := range newer / 20 {
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			for j := range 20 {
				emit(tx, fmt.Sprint("a", i*20+j))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	p2 := emit(x2, "p2")
	if err := x2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	largest := e.startWithBatchSize(t, batch)
	want := newer + 2
	_, firsts := e.readDistinct(t, "orders", 2, want)
	if len(firsts) != want {
		t.Fatalf("%d distinct events published, want %d", len(firsts), want)
	}
	if firsts[0] != p1.String() || firsts[want-1] != p2.String() || !slices.IsSorted(firsts) {
		t.Errorf("first publications of key k out of commit order: first %s (p1 %s), last %s (p2 %s), sorted %v",
			firsts[0], p1, firsts[want-1], p2, slices.IsSorted(firsts))
	}
	if maxN := largest(); maxN > batch {
		t.Errorf("one publish had %d records, more than BatchSize %d", maxN, batch)
	}
}

// startWithBatchSize starts a relay with BatchSize batch; the function it
// returns gives the most records one publish has had so far.
func (e *relayEnv) startWithBatchSize(t *testing.T, batch int) func() int {
	t.Helper()
	var (
		mu   sync.Mutex
		maxN int
	)
	e.start(t, func(c *outbox.Config) {
		c.BatchSize = batch
		c.OnPublish = func(_, _ time.Time, n int) {
			mu.Lock()
			maxN = max(maxN, n)
			mu.Unlock()
		}
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return maxN
	}
}
