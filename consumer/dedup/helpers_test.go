package dedup

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

const testOwner = "3f6c1a52-0d4e-4a57-9b1e-6f0a2c9d8e71"

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newEngine creates the table on a fresh database and returns the engine.
func newEngine(t *testing.T, pool *pgxpool.Pool, tbl Table, opts ...Option) *Engine {
	t.Helper()
	e, err := NewEngine(pool, tbl, opts...)
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
