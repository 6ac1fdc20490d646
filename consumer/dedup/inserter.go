package dedup

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DefaultRefreshInterval is how long an Inserter trusts its cached window.
const DefaultRefreshInterval = time.Minute

// InserterOption configures an Inserter.
type InserterOption func(*Inserter)

// WithRefreshInterval sets how long the cached window is trusted before it
// is re-read from pg_catalog (default one minute).
func WithRefreshInterval(d time.Duration) InserterOption {
	return func(in *Inserter) { in.refreshEvery = d }
}

// Inserter performs the batched dedup insert for one consumer group. It is
// safe for concurrent use; share one per table and group.
type Inserter struct {
	table        Table
	group        string
	refreshEvery time.Duration
}

// BatchResult is the outcome of one Insert, index-aligned with its input.
type BatchResult struct {
	// Fresh[i] is true if ids[i] was not processed before: it was inserted
	// now, and it is the first occurrence of that id in the batch.
	Fresh []bool
	// Outside[i] is true if ids[i] has no partition (outside the dedup
	// window); it was not sent to the database.
	Outside []bool
	// Window is the window the batch was checked against.
	Window Window
}

// NewInserter validates t (after defaults) and group; no SQL is sent.
func NewInserter(t Table, group string, opts ...InserterOption) (*Inserter, error) {
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if group == "" {
		return nil, errors.New("creating dedup inserter: empty consumer group")
	}
	in := &Inserter{table: t, group: group, refreshEvery: DefaultRefreshInterval}
	for _, o := range opts {
		o(in)
	}
	return in, nil
}

// Insert records ids as processed by the inserter's group inside tx, in one
// statement, and reports which are fresh and which are outside the window.
func (in *Inserter) Insert(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (BatchResult, error) {
	return BatchResult{}, errNotImplemented
}
