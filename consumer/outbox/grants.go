package outbox

import (
	"context"
	"fmt"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Access is what a role is granted on an outbox.
type Access int

const (
	// AccessEmitter may emit: USAGE on the schema, INSERT of the event's
	// columns (event_id, topic, key, payload, headers; not tx or
	// created_at; no SELECT, UPDATE or DELETE: the outbox is insert-only
	// for it) and
	// EXECUTE on the emit function. Nothing on the cursor table, whose
	// row holds the relays' lock key.
	AccessEmitter Access = iota + 1
	// AccessRelay may run the relay: USAGE on the schema, SELECT on the table,
	// SELECT on the cursor table and UPDATE of its cursor columns (lo, hi,
	// after, updated_at; not lock_key, which fences the relays).
	AccessRelay
)

// Grant gives role what access needs on t, which Ensure made. GRANT of a
// privilege held already changes nothing, so it can run on every start. It
// runs under the table's maintenance lock.
func Grant(ctx context.Context, pool *pgxpool.Pool, t Table, role string, access Access) error {
	t = t.WithDefaults()
	if err := dedup.ValidateRole(role); err != nil {
		return fmt.Errorf("granting on outbox %s: %w", t, err)
	}
	r := pgx.Identifier{role}.Sanitize()
	stmts := []string{"GRANT USAGE ON SCHEMA " + pgx.Identifier{t.Schema}.Sanitize() + " TO " + r}
	switch access {
	case AccessEmitter:
		// INSERT of the columns the emit function writes only: tx and
		// created_at keep their defaults (the transaction's own id, now).
		// An emitter that set tx could place a row below the relay's
		// cursor (never published) or far above it (never published,
		// its partition never dropped). Revoking the table-wide privilege
		// first takes back one granted before.
		stmts = append(stmts, "REVOKE INSERT ON TABLE "+t.ident()+" FROM "+r,
			"GRANT INSERT ("+insertColumns+") ON TABLE "+t.ident()+" TO "+r,
			"GRANT EXECUTE ON FUNCTION "+emitIdent(t)+"(text, bytea, bytea, jsonb, text) TO "+r)
	case AccessRelay:
		stmts = append(stmts, "GRANT SELECT ON TABLE "+t.ident()+" TO "+r,
			"REVOKE UPDATE ON TABLE "+t.cursorIdent()+" FROM "+r,
			"GRANT SELECT, UPDATE (lo, hi, after, updated_at) ON TABLE "+t.cursorIdent()+" TO "+r)
	default:
		return fmt.Errorf("granting on outbox %s: unknown access %d", t, access)
	}
	return runLocked(ctx, pool, t, "granting", stmts)
}

// Revoke takes back from role what Grant gave it for access on t: the
// privileges on the table, the cursor table and the emit function, not
// USAGE on the schema (which others may have granted it, and which alone
// reaches nothing of the outbox). For a role that no longer emits or
// relays: one removed from an Outbox's emitterRoles, a rotated relay role.
// Revoking what a role does not hold changes nothing. It runs under the
// table's maintenance lock.
func Revoke(ctx context.Context, pool *pgxpool.Pool, t Table, role string, access Access) error {
	t = t.WithDefaults()
	if err := dedup.ValidateRole(role); err != nil {
		return fmt.Errorf("revoking on outbox %s: %w", t, err)
	}
	r := pgx.Identifier{role}.Sanitize()
	var stmts []string
	switch access {
	case AccessEmitter:
		stmts = []string{"REVOKE INSERT ON TABLE " + t.ident() + " FROM " + r,
			"REVOKE INSERT (" + insertColumns + ") ON TABLE " + t.ident() + " FROM " + r,
			"REVOKE EXECUTE ON FUNCTION " + emitIdent(t) + "(text, bytea, bytea, jsonb, text) FROM " + r}
	case AccessRelay:
		stmts = []string{"REVOKE SELECT ON TABLE " + t.ident() + " FROM " + r,
			"REVOKE SELECT, UPDATE ON TABLE " + t.cursorIdent() + " FROM " + r,
			"REVOKE UPDATE (lo, hi, after, updated_at) ON TABLE " + t.cursorIdent() + " FROM " + r}
	default:
		return fmt.Errorf("revoking on outbox %s: unknown access %d", t, access)
	}
	return runLocked(ctx, pool, t, "revoking", stmts)
}

// runLocked runs stmts in order under t's maintenance lock.
func runLocked(ctx context.Context, pool *pgxpool.Pool, t Table, verb string, stmts []string) error {
	eng, err := NewEngine(pool, t)
	if err != nil {
		return err
	}
	return eng.Locked(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s on outbox %s: %s: %w", verb, t, s, err)
			}
		}
		return nil
	})
}

// insertColumns are the columns an emitter may write: those the emit
// function inserts.
const insertColumns = "event_id, topic, key, payload, headers"

func emitIdent(t Table) string {
	t = t.WithDefaults()
	return pgx.Identifier{t.Schema, t.Name + emitSuffix}.Sanitize()
}
