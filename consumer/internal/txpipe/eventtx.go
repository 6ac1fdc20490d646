package txpipe

import (
	"context"
	"errors"
	"strings"

	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errTxOwned is returned to a handler that tries to end the batch transaction.
var errTxOwned = errors.New("consumer: the handler must not commit or roll back the batch transaction")

// errTxDone is returned when a handler uses its tx after it returned.
var errTxDone = errors.New("consumer: transaction used after the handler returned")

// The events of a batch transaction alternate between two savepoint names,
// so an event's ROLLBACK TO can only ever reach its own savepoint: were the
// bookkeeping below ever wrong, the rollback would fail (the batch is
// retried) instead of silently undoing the previous event, whose dedup row
// would still commit. Two fixed names keep pgx's statement cache small.
const (
	savepointA = "idempotent_consumer_event_a"
	savepointB = "idempotent_consumer_event_b"
)

// savepointName is the name with index i (0 or 1).
func savepointName(i int) string {
	if i == 0 {
		return savepointA
	}
	return savepointB
}

// txSavepoints is what the events of one batch transaction share: which of
// their savepoints is established, and whether a savepoint may be pipelined
// with a handler's first statement.
type txSavepoints struct {
	// pipeline is false in safe mode and when pgx would join a pipeline into
	// one simple-protocol string (QueryExecModeSimpleProtocol): there a
	// statement that fails to parse takes the SAVEPOINT down with it.
	pipeline bool
	open     bool // one of the two savepoints is established (the last event's)
	last     int  // index (savepointName) of the established one
	// owner is the event whose handler ran last with the established
	// savepoint: were the savepoint found gone, its handler ended the
	// transaction (COMMIT AND CHAIN, COMMIT; BEGIN) or released it.
	owner *record.Item
}

// savepointGone reports the server saying a savepoint does not exist
// (3B001): the runtime's own savepoint vanished under it.
func savepointGone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "3B001"
}

func newTxSavepoints(tx pgx.Tx, safe bool) *txSavepoints {
	sp := &txSavepoints{}
	if !safe {
		// Config copies the connection's configuration: once per transaction.
		sp.pipeline = tx.Conn().Config().DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol
	}
	return sp
}

// eventTx is the pgx.Tx a handler gets. It opens the event's savepoint
// lazily, pipelined with the handler's first statement, so a handler that
// writes one row costs one round trip, and a handler that never touches the
// database (an HTTP call) costs none. Commit and Rollback are refused: the
// runtime owns the transaction.
//
// The savepoint counts as opened only once the server has answered the
// SAVEPOINT itself, so the runtime always knows whether a ROLLBACK TO
// would reach this event's savepoint.
type eventTx struct {
	tx      pgx.Tx
	sps     *txSavepoints
	name    int      // index (savepointName) of this event's savepoint
	pending []string // statements to run before the handler's first one
	opened  bool     // the event's savepoint is established
	done    bool
	// failed is set when the savepoint statements themselves failed: the
	// connection or transaction is broken, whatever the handler returns.
	failed error
	// redo is set when the handler's statement broke the transaction
	// before this event's savepoint existed (see pendingFailed): no
	// rollback can undo this event alone, so the transaction is given up
	// and redone with each savepoint in a round trip of its own.
	redo error
}

func newEventTx(tx pgx.Tx, sps *txSavepoints) *eventTx {
	t := &eventTx{tx: tx, sps: sps}
	if sps.open {
		t.name = 1 - sps.last
		t.pending = []string{"RELEASE SAVEPOINT " + savepointName(sps.last), "SAVEPOINT " + savepointName(t.name)}
	} else {
		t.pending = []string{"SAVEPOINT " + savepointName(t.name)}
	}
	return t
}

// savepoint is the name of this event's savepoint.
func (t *eventTx) savepoint() string { return savepointName(t.name) }

func (t *eventTx) needsFlush() bool { return len(t.pending) > 0 }

// markOpened records that the server ran the pending statements.
func (t *eventTx) markOpened() {
	t.pending, t.opened = nil, true
	t.sps.open, t.sps.last = true, t.name
}

// pendingFailed classifies a failure of the pending savepoint statements, or
// of what pgx did before sending them, from the error and the connection's
// state. withStatement says the handler's statement was in the same
// pipeline. It returns err, for the handler.
func (t *eventTx) pendingFailed(err error, withStatement bool) error {
	pc := t.tx.Conn().PgConn()
	var pre pgx.ErrPreprocessingBatch
	switch {
	case withStatement && errors.As(err, &pre):
		// pgx prepares and encodes the handler's statement before the
		// pipeline is sent. A statement that fails to prepare aborts the
		// transaction; an argument that can't be encoded makes pgx close
		// the connection (the savepoint was already queued). Either way
		// the savepoint never ran and the fault is the statement's: redo
		// the transaction in safe mode, where the statement fails on its
		// own, after its savepoint.
		t.redo = err
	case pc.IsClosed():
		t.failed = err
	case pc.TxStatus() == 'T':
		// The transaction is intact, so nothing reached the server: the
		// statement was refused on the client (an argument that can't be
		// encoded, in QueryExecModeExec). That is the handler's error; the
		// savepoint stays pending for its next statement.
	case withStatement:
		t.redo = err
	default:
		t.failed = err
	}
	return err
}

// flush runs the pending savepoint statements on their own.
func (t *eventTx) flush(ctx context.Context) error {
	if t.done {
		return errTxDone
	}
	if len(t.pending) == 0 {
		return nil
	}
	if _, err := t.tx.Exec(ctx, strings.Join(t.pending, "; ")); err != nil {
		return t.pendingFailed(err, false)
	}
	t.markOpened()
	return nil
}

func (t *eventTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.done {
		return pgconn.CommandTag{}, errTxDone
	}
	if !t.needsFlush() {
		return t.tx.Exec(ctx, sql, args...)
	}
	if !t.sps.pipeline {
		if err := t.flush(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.tx.Exec(ctx, sql, args...)
	}
	if len(args) == 0 {
		return t.execNoArgs(ctx, sql)
	}
	if _, isMode := args[0].(pgx.QueryExecMode); isMode {
		if err := t.flush(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.tx.Exec(ctx, sql, args...)
	}
	// Extended protocol: pipeline the savepoint with the statement, and
	// read the savepoint's own results before the statement's.
	b := &pgx.Batch{}
	for _, p := range t.pending {
		b.Queue(p)
	}
	b.Queue(sql, args...)
	br := t.tx.SendBatch(ctx, b)
	for range t.pending {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return pgconn.CommandTag{}, t.pendingFailed(err, true)
		}
	}
	t.markOpened()
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// execNoArgs pipelines the savepoint with a statement that has no
// arguments, each as its own extended-protocol statement, so a statement
// that fails to parse can't take the savepoint down with it (as it would in
// one simple-protocol string). The extended protocol takes one statement
// per message: a string of several is refused with a syntax error
// (42601), after which the statement is rolled back to the now established
// savepoint and sent alone with the simple protocol, as pgx would have.
func (t *eventTx) execNoArgs(ctx context.Context, sql string) (pgconn.CommandTag, error) {
	p := t.tx.Conn().PgConn().StartPipeline(ctx)
	for _, s := range t.pending {
		p.SendQueryParams(s, nil, nil, nil, nil)
	}
	p.SendQueryParams(sql, nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		_ = p.Close()
		return pgconn.CommandTag{}, t.pendingFailed(err, true)
	}
	for range t.pending {
		if _, err := pipelineResult(p); err != nil {
			_ = p.Close()
			return pgconn.CommandTag{}, t.pendingFailed(err, true)
		}
	}
	t.markOpened()
	tag, err := pipelineResult(p)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42601" {
		return tag, err
	}
	if _, rerr := t.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+t.savepoint()); rerr != nil {
		t.failed = rerr
		return pgconn.CommandTag{}, rerr
	}
	return t.tx.Exec(ctx, sql)
}

// pipelineResult reads the next statement's result from p.
func pipelineResult(p *pgconn.Pipeline) (pgconn.CommandTag, error) {
	res, err := p.GetResults()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return pgconn.CommandTag{}, errors.New("pipeline: unexpected result")
	}
	return rr.Close()
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
