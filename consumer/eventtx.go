package consumer

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errTxOwned is returned to a handler that tries to end the batch transaction.
var errTxOwned = errors.New("consumer: the handler must not commit or roll back the batch transaction")

// errTxDone is returned when a handler uses its tx after it returned.
var errTxDone = errors.New("consumer: transaction used after the handler returned")

// eventTx is the pgx.Tx a handler gets. It opens the event's savepoint
// lazily, pipelined with the handler's first statement, so a handler that
// writes one row costs one round trip, and a handler that never touches the
// database (an HTTP call) costs none. Commit and Rollback are refused: the
// runtime owns the transaction.
type eventTx struct {
	tx      pgx.Tx
	pending []string // statements to run before the handler's first one
	opened  bool     // the event's savepoint is (or may be) established
	done    bool
	// failed is set when the savepoint statements themselves failed: the
	// connection or transaction is broken, whatever the handler returns.
	failed error
}

func (t *eventTx) needsFlush() bool { return len(t.pending) > 0 }

// flush runs the pending savepoint statements on their own.
func (t *eventTx) flush(ctx context.Context) error {
	if t.done {
		return errTxDone
	}
	if len(t.pending) == 0 {
		return nil
	}
	if _, err := t.tx.Exec(ctx, strings.Join(t.pending, "; ")); err != nil {
		t.failed = err
		return err
	}
	t.pending, t.opened = nil, true
	return nil
}

func (t *eventTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.done {
		return pgconn.CommandTag{}, errTxDone
	}
	if !t.needsFlush() {
		return t.tx.Exec(ctx, sql, args...)
	}
	if len(args) == 0 {
		// Simple protocol: one string, several statements, one round trip;
		// the tag is the last statement's, the handler's own.
		tag, err := t.tx.Exec(ctx, strings.Join(t.pending, "; ")+"; "+sql)
		t.pending, t.opened = nil, true
		return tag, err
	}
	if _, isMode := args[0].(pgx.QueryExecMode); isMode {
		if err := t.flush(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.tx.Exec(ctx, sql, args...)
	}
	// Extended protocol: pipeline the savepoint with the statement.
	b := &pgx.Batch{}
	for _, p := range t.pending {
		b.Queue(p)
	}
	b.Queue(sql, args...)
	br := t.tx.SendBatch(ctx, b)
	for range t.pending {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			t.failed = err
			return pgconn.CommandTag{}, err
		}
	}
	t.pending, t.opened = nil, true
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *eventTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

func (t *eventTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.flush(ctx); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

func (t *eventTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.flush(ctx); err != nil {
		return errBatch{err}
	}
	return t.tx.SendBatch(ctx, b)
}

func (t *eventTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.flush(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, cols, src)
}

func (t *eventTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

// Begin starts a nested pseudo transaction (a savepoint of the handler's own).
func (t *eventTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

func (t *eventTx) Commit(context.Context) error   { return errTxOwned }
func (t *eventTx) Rollback(context.Context) error { return errTxOwned }

// LargeObjects and Conn hand out the connection itself, so the savepoint is
// established first (without a context: these methods take none).
func (t *eventTx) LargeObjects() pgx.LargeObjects {
	_ = t.flush(context.Background())
	return t.tx.LargeObjects()
}

func (t *eventTx) Conn() *pgx.Conn {
	_ = t.flush(context.Background())
	return t.tx.Conn()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }
