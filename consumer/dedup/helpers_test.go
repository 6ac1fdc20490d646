package dedup

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

const testOwner = "3f6c1a52-0d4e-4a57-9b1e-6f0a2c9d8e71"

// Time bounds of the database tests. Every database call of a test runs
// under testCtx, so a wait on the server fails that call, and the test, with
// a context error. What a context cannot bound (a channel, a WaitGroup, a
// pool that waits for a connection still in use when it is closed) is
// bounded by recvWithin and waitWithin, and, for whatever is left,
// testDeadline: newPool's guard reports a test still running after it as
// hung, with what the server's sessions are doing and every goroutine, and
// ends the run at once rather than at go test's -timeout.
const (
	ctxTimeout   = 90 * time.Second
	testDeadline = 150 * time.Second
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), ctxTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newPool is consumertest.NewPool under the hang guard, which also covers
// the test's cleanup (closing the pool, dropping the database).
func newPool(t *testing.T) *pgxpool.Pool {
	return newPoolWithin(t, testDeadline)
}

func newPoolWithin(t *testing.T, limit time.Duration) *pgxpool.Pool {
	t.Helper()
	g := &hangGuard{name: t.Name(), limit: limit}
	t.Cleanup(g.stop) // first registered, so it runs after every other cleanup
	// The clock starts once the database is there: the first test of the
	// binary also waits for the shared cluster's initdb, which a busy disk
	// can make slow without anything being hung.
	pool := consumertest.NewPool(t)
	g.start(pool.Config().ConnConfig.Copy())
	return pool
}

type hangGuard struct {
	name  string
	limit time.Duration
	mu    sync.Mutex
	timer *time.Timer
	conn  *pgx.ConnConfig
}

func (g *hangGuard) start(c *pgx.ConnConfig) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.conn = c
	g.timer = time.AfterFunc(g.limit, g.fire)
}

func (g *hangGuard) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
}

// fire reports the hang and panics: a panic outside the test's goroutine
// ends the test binary, as go test's own -timeout does, but names the test
// and shows the server's side of the wait.
func (g *hangGuard) fire() {
	g.mu.Lock()
	cfg := g.conn
	g.mu.Unlock()
	fmt.Fprintf(os.Stderr, "\n%s is still running (cleanup included) %s after its database was created: hung\n", g.name, g.limit)
	fmt.Fprint(os.Stderr, serverActivity(cfg))
	debug.SetTraceback("all")
	panic(fmt.Sprintf("%s hung: still running after %s; the server's sessions and locks are listed above, every goroutine below", g.name, g.limit))
}

// serverActivity lists the server's client sessions (what each runs and
// waits for, and who blocks it) and the lock requests not granted, over a
// connection of its own.
func serverActivity(cfg *pgx.ConnConfig) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Sprintf("  (cannot connect to list the server's sessions: %v)\n", err)
	}
	defer conn.Close(context.Background())
	var b strings.Builder
	b.WriteString("server sessions (pid db state wait blocked-by xact-age query):\n")
	rows, err := conn.Query(ctx, `
SELECT pid, coalesce(datname, ''), coalesce(state, ''), coalesce(wait_event_type || ':' || wait_event, ''),
       pg_blocking_pids(pid)::text, coalesce(to_char(now() - xact_start, 'HH24:MI:SS.MS'), ''), left(query, 300)
  FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY pid`)
	if err == nil {
		for rows.Next() {
			var pid int
			var db, state, wait, blockers, age, query string
			if rows.Scan(&pid, &db, &state, &wait, &blockers, &age, &query) == nil {
				fmt.Fprintf(&b, "  %d %s %s %s %s %s %q\n", pid, db, state, wait, blockers, age, query)
			}
		}
		err = rows.Err()
	}
	if err != nil {
		fmt.Fprintf(&b, "  (listing sessions: %v)\n", err)
	}
	b.WriteString("lock requests not granted (pid type mode relation):\n")
	rows, err = conn.Query(ctx, `SELECT pid, locktype, mode, coalesce(relation::regclass::text, '') FROM pg_locks WHERE NOT granted ORDER BY pid`)
	if err == nil {
		for rows.Next() {
			var pid int
			var typ, mode, rel string
			if rows.Scan(&pid, &typ, &mode, &rel) == nil {
				fmt.Fprintf(&b, "  %d %s %s %s\n", pid, typ, mode, rel)
			}
		}
		err = rows.Err()
	}
	if err != nil {
		fmt.Fprintf(&b, "  (listing locks: %v)\n", err)
	}
	return b.String()
}

// recvWithin receives from ch, failing the test if nothing comes within d.
func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
	var zero T
	return zero
}

// waitWithin waits for wg, failing the test if it takes longer than d.
func waitWithin(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	recvWithin(t, done, d, what)
}

// newEngine creates the table on a fresh database and returns the engine.
// The tests maintain with clocks of their own: the table is made without
// the first partitions EnsureTable would make at the real time
// (WithoutFirstPartitions; TestEnsureTableIsUsableAtOnce tests those).
func newEngine(t *testing.T, pool *pgxpool.Pool, tbl Table, opts ...Option) *Engine {
	t.Helper()
	e, err := NewEngine(pool, tbl, append([]Option{WithoutFirstPartitions()}, opts...)...)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	if err := e.EnsureTable(testCtx(t), testOwner); err != nil {
		t.Fatalf("EnsureTable: %v", err)
	}
	return e
}

// idAt returns a UUID v7 stamped at tm with random low bits, as a producer
// at that time would have made.
func idAt(tm time.Time) uuid.UUID {
	var u uuid.UUID
	if _, err := rand.Read(u[:]); err != nil {
		panic(err)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(tm.UnixMilli()))
	copy(u[:6], b[2:])
	u[6] = 0x70 | u[6]&0x0f // version 7
	u[8] = 0x80 | u[8]&0x3f // RFC 4122 variant
	return u
}

// insertCommit inserts ids in a transaction of its own and commits.
func insertCommit(t *testing.T, pool *pgxpool.Pool, in *Inserter, ids ...uuid.UUID) BatchResult {
	t.Helper()
	ctx := testCtx(t)
	var res BatchResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = in.Insert(ctx, tx, ids)
		return err
	})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return res
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(testCtx(t), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("counting %s: %v", table, err)
	}
	return n
}

func partitionNames(ps []ObservedPartition) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}
