package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestRedeliveryRegression is the reason the table is partitioned by the
// event id: with the obvious time-partitioned layout a redelivered event is
// a new key and gets processed again.
func TestRedeliveryRegression(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	event := idAt(time.Date(2024, 3, 1, 9, 59, 0, 0, time.UTC))

	t.Run("naive layout inserts a redelivery twice", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `
CREATE TABLE naive (event_id uuid NOT NULL, consumer_group text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (event_id, processed_at)) PARTITION BY RANGE (processed_at);
CREATE TABLE naive_d1 PARTITION OF naive FOR VALUES FROM ('2024-03-01 00:00+00') TO ('2024-03-02 00:00+00');
CREATE TABLE naive_d2 PARTITION OF naive FOR VALUES FROM ('2024-03-02 00:00+00') TO ('2024-03-03 00:00+00')`); err != nil {
			t.Fatal(err)
		}
		// processed_at is "now" at each delivery: first delivery, a redelivery
		// five minutes later, and one the next day (in the next partition).
		inserted := 0
		for _, at := range []string{"2024-03-01 10:00+00", "2024-03-01 10:05+00", "2024-03-02 09:00+00"} {
			tag, err := pool.Exec(ctx, `INSERT INTO naive (event_id, consumer_group, processed_at) VALUES ($1, 'g', $2) ON CONFLICT DO NOTHING`, event, at)
			if err != nil {
				t.Fatal(err)
			}
			inserted += int(tag.RowsAffected())
		}
		if inserted != 3 {
			t.Fatalf("naive layout took %d of 3 deliveries; the regression this test documents is that it takes all 3", inserted)
		}
	})

	t.Run("our layout absorbs every redelivery", func(t *testing.T) {
		tbl := Table{Name: "processed_event", Scope: ScopeGlobal, Interval: Daily}
		e := newEngine(t, pool, tbl)
		if _, err := e.Maintain(ctx, time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC), 0, 48*time.Hour); err != nil {
			t.Fatal(err)
		}
		in, err := NewInserter(tbl, "g")
		if err != nil {
			t.Fatal(err)
		}
		if r := insertCommit(t, pool, in, event); !r.Fresh[0] {
			t.Fatal("first delivery not fresh")
		}
		if r := insertCommit(t, pool, in, event); r.Fresh[0] || r.Outside[0] {
			t.Fatalf("redelivery: %+v, want a duplicate", r)
		}
		// The next day's partition is created; the event keeps its own
		// partition because its key is its own timestamp.
		res, err := e.Maintain(ctx, time.Date(2024, 3, 2, 9, 0, 0, 0, time.UTC), 0, 48*time.Hour)
		if err != nil || !slices.Contains(names(res.Created), "processed_event_p20240302") {
			t.Fatalf("next partition: created %v, err %v", names(res.Created), err)
		}
		if r := insertCommit(t, pool, in, event); r.Fresh[0] || r.Outside[0] {
			t.Fatalf("redelivery after the next partition: %+v, want a duplicate", r)
		}
		if n := countRows(t, pool, "processed_event"); n != 1 {
			t.Fatalf("%d rows for one event", n)
		}
	})
}

func TestInsertBatchSemantics(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	now := time.Now().UTC()
	for _, scope := range []Scope{ScopeConsumerGroup, ScopeGlobal} {
		t.Run(string(scope), func(t *testing.T) {
			tbl := Table{Name: "pe_" + strings.ToLower(string(scope)), Scope: scope, Interval: Hourly}
			e := newEngine(t, pool, tbl)
			if _, err := e.Maintain(ctx, now, 1, 2*time.Hour); err != nil {
				t.Fatal(err)
			}
			g1, _ := NewInserter(tbl, "g1")
			g2, _ := NewInserter(tbl, "g2")
			a, b, c, d := idAt(now), idAt(now), idAt(now.Add(-time.Hour)), idAt(now.Add(time.Hour))
			past, future := idAt(now.Add(-5*time.Hour)), idAt(now.Add(5*time.Hour))

			r := insertCommit(t, pool, g1, a, b, a, past, c, b, future)
			if want := []bool{true, true, false, false, true, false, false}; !slices.Equal(r.Fresh, want) {
				t.Fatalf("Fresh = %v, want %v (first occurrence wins)", r.Fresh, want)
			}
			if want := []bool{false, false, false, true, false, false, true}; !slices.Equal(r.Outside, want) {
				t.Fatalf("Outside = %v, want %v", r.Outside, want)
			}
			if r.Window.Contains(EventTime(past)) || r.Window.Contains(EventTime(future)) || !r.Window.Contains(EventTime(a)) {
				t.Fatalf("window %s", r.Window)
			}
			oe := &OutsideWindowError{ID: past, Window: r.Window}
			if !strings.Contains(oe.Error(), past.String()) {
				t.Fatalf("OutsideWindowError does not name the id: %v", oe)
			}

			r = insertCommit(t, pool, g1, c, d)
			if !slices.Equal(r.Fresh, []bool{false, true}) {
				t.Fatalf("second batch Fresh = %v, want [false true]", r.Fresh)
			}
			r = insertCommit(t, pool, g2, a, d)
			wantOther := []bool{true, true} // each group processes an event once
			if scope == ScopeGlobal {
				wantOther = []bool{false, false} // once across groups
			}
			if !slices.Equal(r.Fresh, wantOther) {
				t.Fatalf("other group Fresh = %v, want %v", r.Fresh, wantOther)
			}
			if r := insertCommit(t, pool, g1); len(r.Fresh) != 0 {
				t.Fatalf("empty batch: %+v", r)
			}
		})
	}
}

// TestConcurrentSameID: two transactions insert the same id at once. The
// second waits for the first; it sees a duplicate if the first commits and a
// fresh id if the first rolls back.
func TestConcurrentSameID(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Scope: ScopeGlobal, Interval: Daily}
	e := newEngine(t, pool, tbl)
	now := time.Now().UTC()
	if _, err := e.Maintain(ctx, now, 1, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	in, _ := NewInserter(tbl, "g")

	for _, firstCommits := range []bool{true, false} {
		name := "first rolls back"
		if firstCommits {
			name = "first commits"
		}
		t.Run(name, func(t *testing.T) {
			id := idAt(now)
			tx1, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx1.Rollback(ctx)
			r1, err := in.Insert(ctx, tx1, []uuid.UUID{id})
			if err != nil || !r1.Fresh[0] {
				t.Fatalf("tx1: %+v %v", r1, err)
			}
			type outcome struct {
				res BatchResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				var res BatchResult
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var err error
					res, err = in.Insert(ctx, tx, []uuid.UUID{id})
					return err
				})
				done <- outcome{res, err}
			}()
			// tx2 must be waiting on tx1's transaction lock, not finished.
			waitFor(t, func() bool {
				var n int
				_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
					AND wait_event_type = 'Lock' AND wait_event = 'transactionid' AND query LIKE 'INSERT INTO%'`).Scan(&n)
				return n == 1
			}, "second insert waiting on the first transaction")
			select {
			case o := <-done:
				t.Fatalf("second insert returned while the first was open: %+v %v", o.res, o.err)
			default:
			}
			if firstCommits {
				err = tx1.Commit(ctx)
			} else {
				err = tx1.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			o := recvWithin(t, done, time.Minute, "the second insert to return after the first ended")
			if o.err != nil {
				t.Fatal(o.err)
			}
			if o.res.Fresh[0] == firstCommits {
				t.Fatalf("second insert Fresh = %v after the first %s", o.res.Fresh[0], name)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = $1`, id).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%d rows for the id (err %v), want 1", n, err)
			}
		})
	}
}

// TestInsertAfterWindowShrank: a partition is dropped after the inserter
// cached the window. The insert of an id in it fails with 23514 under the
// savepoint; Insert re-reads the window, reports the id outside, inserts the
// rest, and the transaction stays usable.
func TestInsertAfterWindowShrank(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Interval: Hourly}
	e := newEngine(t, pool, tbl)
	now := time.Now().UTC()
	if _, err := e.Maintain(ctx, now, 1, 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	in, _ := NewInserter(tbl, "g", WithRefreshInterval(time.Hour))
	before := insertCommit(t, pool, in, idAt(now)).Window
	old := idAt(now.Add(-3 * time.Hour)) // in the oldest partition
	if !before.Contains(EventTime(old)) {
		t.Fatalf("setup: %s not in %s", EventTime(old), before)
	}
	res, err := e.Maintain(ctx, now.Add(2*time.Hour), 1, 3*time.Hour)
	if err != nil || len(res.Dropped) == 0 {
		t.Fatalf("maintain dropped %v, err %v", names(res.Dropped), err)
	}
	if in.Window() != before {
		t.Fatal("setup: the inserter's cache was refreshed early")
	}

	fresh := idAt(now)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	r, err := in.Insert(ctx, tx, []uuid.UUID{old, fresh})
	if err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if !slices.Equal(r.Outside, []bool{true, false}) || !slices.Equal(r.Fresh, []bool{false, true}) {
		t.Fatalf("Outside %v Fresh %v, want [true false] [false true]", r.Outside, r.Fresh)
	}
	if !r.Window.From.After(before.From) {
		t.Fatalf("window %s not refreshed from %s", r.Window, before)
	}
	var one int
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("transaction poisoned after the retried insert: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = $1`, fresh).Scan(&n); err != nil || n != 1 {
		t.Fatalf("fresh id stored %d times (err %v)", n, err)
	}
}

type countingTracer struct{ queries atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestHostileIdentifiersRejectedBeforeSQL: no query is sent, not even a
// connection opened, for a table whose schema or name is hostile.
func TestHostileIdentifiersRejectedBeforeSQL(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(consumertest.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	hostile := []string{
		``, `processed"event`, `x"; DROP TABLE users; --`, `a;b`, `a'b`, `a b`, `a-b`, `a.b`, "a\x00b",
		`événement`, `tablé`, "\u0430bc" /* Cyrillic a */, `Processed_Event`,
		strings.Repeat("a", 64), strings.Repeat("a", 100),
		`select`, `table`, `user`, `order`, `all`, `from`, `current_user`,
		`1abc`, `9`, `pg_catalog`, `pg_toast`,
	}
	for _, h := range hostile {
		if err := ValidateIdentifier(h); !errors.Is(err, ErrInvalidIdentifier) {
			t.Errorf("ValidateIdentifier(%q) = %v, want ErrInvalidIdentifier", h, err)
		}
		for _, tbl := range []Table{{Name: h}, {Schema: h}} {
			if h == "" {
				continue // empty means "default" in a Table
			}
			if _, err := NewEngine(pool, tbl, WithoutFirstPartitions()); err == nil {
				t.Errorf("NewEngine(%+v, WithoutFirstPartitions()) accepted it", tbl)
			}
			if _, err := NewInserter(tbl, "g"); err == nil {
				t.Errorf("NewInserter(%+v) accepted it", tbl)
			}
		}
	}
	// 52 bytes is a valid identifier but leaves no room for the suffix.
	if _, err := NewEngine(pool, Table{Name: strings.Repeat("a", MaxTableNameLen+1)}, WithoutFirstPartitions()); err == nil {
		t.Errorf("NewEngine accepted a %d-byte table name", MaxTableNameLen+1)
	}
	if n := tracer.queries.Load(); n != 0 || pool.Stat().TotalConns() != 0 {
		t.Fatalf("%d queries sent, %d connections opened while rejecting identifiers", n, pool.Stat().TotalConns())
	}
	// The identifier rules accept what the defaults and the longest table
	// name need.
	if _, err := NewEngine(pool, Table{Schema: "dedup_1", Name: strings.Repeat("a", MaxTableNameLen)}, WithoutFirstPartitions()); err != nil {
		t.Fatalf("NewEngine(valid, WithoutFirstPartitions()) = %v", err)
	}
}

// TestReservedKeywordsMatchServer compares our reserved word list with the
// running server's.
func TestReservedKeywordsMatchServer(t *testing.T) {
	pool := newPool(t)
	rows, err := pool.Query(testCtx(t), `SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T')`)
	if err != nil {
		t.Fatal(err)
	}
	words, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(words) < 50 {
		t.Fatalf("server listed only %d reserved words", len(words))
	}
	for _, w := range words {
		if ValidateIdentifier(w) == nil {
			t.Errorf("server reserved word %q is accepted", w)
		}
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestForget: Forget takes back the row of the inserter's group under
// ScopeConsumerGroup and the id's row under ScopeGlobal, in the caller's
// transaction; the id is then fresh again. An id without a row, even one
// outside the window, is not an error.
func TestForget(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	now := time.Now().UTC()
	for _, scope := range []Scope{ScopeConsumerGroup, ScopeGlobal} {
		t.Run(string(scope), func(t *testing.T) {
			tbl := Table{Name: "pf_" + strings.ToLower(string(scope)), Scope: scope, Interval: Daily}
			e := newEngine(t, pool, tbl)
			if _, err := e.Maintain(ctx, now, 1, 24*time.Hour); err != nil {
				t.Fatal(err)
			}
			g1, _ := NewInserter(tbl, "g1")
			g2, _ := NewInserter(tbl, "g2")
			a, b := idAt(now), idAt(now)
			insertCommit(t, pool, g1, a, b)
			if scope == ScopeConsumerGroup {
				insertCommit(t, pool, g2, a)
			}
			rowsOf := func(id uuid.UUID) int {
				var n int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+tbl.Name+` WHERE event_id = $1`, id).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}

			// As the runtime does for an event given up: insert and forget in
			// one transaction, so the row is never visible.
			c := idAt(now)
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				r, err := g1.Insert(ctx, tx, []uuid.UUID{c})
				if err != nil {
					return fmt.Errorf("insert: %w", err)
				}
				if !r.Fresh[0] {
					return fmt.Errorf("insert: %+v: not fresh", r)
				}
				return g1.Forget(ctx, tx, c)
			})
			if err != nil || rowsOf(c) != 0 {
				t.Fatalf("insert+forget in one transaction: err %v, %d rows left", err, rowsOf(c))
			}

			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return g1.Forget(ctx, tx, a) })
			if err != nil {
				t.Fatal(err)
			}
			want := 0 // Global: the id's only row
			if scope == ScopeConsumerGroup {
				want = 1 // g2's row stays
			}
			if n := rowsOf(a); n != want {
				t.Fatalf("after forgetting %s for g1: %d rows, want %d", a, n, want)
			}
			if rowsOf(b) != 1 {
				t.Fatal("forgetting one id took another")
			}
			if r := insertCommit(t, pool, g1, a); !r.Fresh[0] {
				t.Fatalf("forgotten id not fresh again for g1: %+v", r)
			}

			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := g1.Forget(ctx, tx, idAt(now)); err != nil {
					return err
				}
				return g1.Forget(ctx, tx, idAt(now.AddDate(-1, 0, 0)))
			})
			if err != nil {
				t.Fatalf("forgetting ids without rows: %v", err)
			}
			if err := g1.Forget(ctx, nil, a); err == nil {
				t.Fatal("Forget with a nil transaction succeeded")
			}
		})
	}
}
