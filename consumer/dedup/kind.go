package dedup

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Tables of other kinds. The partition engine (planner, create and attach,
// detach concurrently and drop, the maintenance lock) does not depend on the
// processed_event columns: another range-partitioned table keyed by a UUID v7
// event_id can be kept by it too. consumer/outbox does so for the outbox
// table. Such a table is created by its own package, with a Marker whose Kind
// names it (MarkerComment), and managed by an Engine made WithKind of the
// same name; EnsureTable, DropTable, the claim functions, grants and the
// registry are for processed_event tables only.

// DropGuard decides, on the maintenance session (which holds the table's
// advisory lock), whether partition p, due to be dropped by the retention,
// may go: keep true leaves it for a later run. consumer/outbox keeps a
// partition holding a row that is not published yet.
type DropGuard func(ctx context.Context, conn *pgx.Conn, p Partition) (keep bool, err error)

// WithKind makes the engine manage a table whose marker's Kind is kind ("" is
// a processed_event table): Maintain refuses a table of another kind
// (*LayoutError), and a table of a kind other than "" has one layout version
// of its own (the marker's version 1) that no processed_event migration
// touches.
func WithKind(kind string) Option { return func(c *engineConfig) { c.kind = kind } }

// WithDropGuard installs a guard that Maintain asks before it detaches and
// drops an expired partition.
func WithDropGuard(g DropGuard) Option { return func(c *engineConfig) { c.dropGuard = g } }

// kindLayoutSteps is the layout of a table of another kind: version 1, the
// version its package writes into the marker.
var kindLayoutSteps = layoutSteps[:1]

// MarkerComment returns m as the SQL string literal for COMMENT ON TABLE,
// for packages that create a table of another kind.
func MarkerComment(m Marker) (string, error) { return jsonLiteral(m) }

// Locked runs f on a session that holds the table's maintenance advisory
// lock (with the engine's lock_timeout and statement_timeout), so that f's
// DDL never runs beside a Maintain of the same table, in this process or
// another.
func (e *Engine) Locked(ctx context.Context, f func(ctx context.Context, conn *pgx.Conn) error) error {
	conn, release, err := e.session(ctx)
	if err != nil {
		return fmt.Errorf("locking %s: %w", e.table, err)
	}
	defer release()
	return f(ctx, conn)
}

// checkKind refuses a table marked as another kind.
func (e *Engine) checkKind(st State) error {
	if st.Exists && st.Marker.Kind != e.cfg.kind {
		name := func(k string) string {
			if k == "" {
				return "a dedup table"
			}
			return "kind " + k
		}
		return &LayoutError{Table: e.table.String(), Problems: []string{fmt.Sprintf("marked as %s, this engine manages %s", name(st.Marker.Kind), name(e.cfg.kind))}}
	}
	return nil
}

// keepPartition asks the drop guard, if any.
func (e *Engine) keepPartition(ctx context.Context, conn *pgx.Conn, p Partition) (bool, error) {
	if e.cfg.dropGuard == nil {
		return false, nil
	}
	keep, err := e.cfg.dropGuard(ctx, conn, p)
	if err != nil {
		return true, fmt.Errorf("asking whether partition %s may be dropped: %w", p.Name, err)
	}
	return keep, nil
}
