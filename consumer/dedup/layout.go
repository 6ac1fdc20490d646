package dedup

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Layout versions. The table's marker records the version of the layout it
// was created with or last migrated to ("version"; a marker without one is
// version 0, as written before the field was read). EnsureTable and
// Maintain migrate an older table step by step up to markerVersion, and
// every call that changes the table refuses a newer one (*LayoutVersionError):
// a downgraded operator does not know what a newer layout consists of, so
// it must not create partitions in it, drop them, or drop the table.
//
// The next layout change is one layoutStep appended to layoutSteps and
// markerVersion raised by one (a test checks that they agree).

// layoutStep changes a table from layout version From to From+1.
type layoutStep struct {
	// From is the version the step starts from.
	From int
	// What says, for errors and docs, what the step changes.
	What string
	// Apply runs the step's statements on conn, inside the transaction
	// that afterwards rewrites the marker to From+1, under the table's
	// advisory lock: a failure or a crash leaves the table at From, and
	// the next call runs the step again. A step that needs a statement
	// which cannot run in a transaction block (CREATE INDEX CONCURRENTLY,
	// DETACH ... CONCURRENTLY) needs a runner that commits per statement
	// and must then be idempotent; none does yet. nil: nothing to change
	// but the marker.
	Apply func(ctx context.Context, e *Engine, conn *pgx.Conn) error
}

// layoutSteps is the registry of migrations, one per version, in order:
// layoutSteps[i].From == i.
var layoutSteps = []layoutStep{
	{
		From: 0,
		What: "record the layout version in the marker (markers written before the version was read may lack it; the layout itself is unchanged)",
	},
}

// LayoutVersionError reports a table whose marker names a layout version
// newer than this build knows: it was created or migrated by a newer
// release. Nothing was changed. It is never retryable: only a build that
// knows the version (an upgrade again) can manage the table.
type LayoutVersionError struct {
	Table string // schema-qualified
	Found int    // the version in the table's marker
	Known int    // the newest version this build knows
}

// Error names both versions and what to do.
func (e *LayoutVersionError) Error() string {
	return fmt.Sprintf("table %s has layout version %d, newer than version %d that this build knows: it was laid out by a newer release; refusing to change it (run a release that knows version %d, or restore the table from before the upgrade)",
		e.Table, e.Found, e.Known, e.Found)
}

// LayoutVersion is the newest table layout version this build knows: the
// version written into new markers and the one older tables are migrated
// to.
func LayoutVersion() int { return markerVersion }

// MigrationResult reports the layout migration of one call.
type MigrationResult struct {
	From, To int      // versions before and after; equal when nothing ran
	Steps    []string // what each step that ran changed, in order
}

// layoutVersion is the version this engine migrates to and writes into new
// markers: markerVersion, unless a test gave the engine other steps.
func (e *Engine) layoutVersion() int { return len(e.steps()) }

func (e *Engine) steps() []layoutStep {
	if e.cfg.layout != nil {
		return e.cfg.layout
	}
	if e.cfg.kind != "" {
		return kindLayoutSteps
	}
	return layoutSteps
}

// checkVersion refuses a table laid out by a newer release.
func (e *Engine) checkVersion(st State) error {
	if st.Exists && st.Marker.Version > e.layoutVersion() {
		return &LayoutVersionError{Table: e.table.String(), Found: st.Marker.Version, Known: e.layoutVersion()}
	}
	return nil
}

// migrateLayout runs the steps from the table's marker version up to
// the engine's layout version, each in a transaction of its own that also rewrites the
// marker's version, on the session's connection (which holds the table's
// advisory lock). st is the table as observed on that connection; the
// caller has checked its owner. A busy lock is retried like other DDL.
func (e *Engine) migrateLayout(ctx context.Context, conn *pgx.Conn, st State) (MigrationResult, error) {
	res := MigrationResult{From: st.Marker.Version, To: st.Marker.Version}
	if err := e.checkVersion(st); err != nil {
		return res, err
	}
	steps := e.steps()
	m := st.Marker
	for m.Version < len(steps) {
		if m.Version < 0 || steps[m.Version].From != m.Version {
			return res, fmt.Errorf("migrating the layout of %s: no step from version %d", e.table, m.Version)
		}
		step := steps[m.Version]
		next := m
		next.Version = step.From + 1
		op := fmt.Sprintf("migrating the layout of %s from version %d to %d (%s)", e.table, step.From, next.Version, step.What)
		err := e.retryOnLock(ctx, func() error { return statementErr(op, e.runStep(ctx, conn, step, next)) })
		if err != nil {
			return res, err
		}
		m = next
		res.To = m.Version
		res.Steps = append(res.Steps, step.What)
	}
	return res, nil
}

// runStep is one attempt of a step and the marker's rewrite in one
// transaction; any error rolls both back.
func (e *Engine) runStep(ctx context.Context, conn *pgx.Conn, step layoutStep, next Marker) (err error) {
	marker, err := jsonLiteral(next)
	if err != nil {
		return err
	}
	if err := e.exec(ctx, conn, "BEGIN"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = e.exec(ctx, conn, "ROLLBACK")
		}
	}()
	if step.Apply != nil {
		if err := step.Apply(ctx, e, conn); err != nil {
			return err
		}
	}
	if err := e.exec(ctx, conn, "COMMENT ON TABLE "+e.parent()+" IS "+marker); err != nil {
		return err
	}
	return e.exec(ctx, conn, "COMMIT")
}
