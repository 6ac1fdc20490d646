package dedup

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DropTable drops the table, its partitions and leftover standalone tables
// of ours, if its marker names owner; *OwnershipError otherwise. It refuses
// while foreign partitions are attached (dropping the parent would drop
// them), and a table of a newer layout version (*LayoutVersionError). A
// missing table is not an error.
func (e *Engine) DropTable(ctx context.Context, owner string) error {
	if err := ValidateOwner(owner); err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	defer release()
	return e.dropTable(ctx, conn, owner)
}

// dropTable is DropTable on a session that holds the table's advisory lock.
func (e *Engine) dropTable(ctx context.Context, conn *pgx.Conn, owner string) error {
	st, err := e.observe(ctx, conn)
	if err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	if !st.Exists {
		return e.dropLockTable(ctx, conn)
	}
	if st.Owner != owner {
		return &OwnershipError{Table: e.table.String(), Owner: st.Owner}
	}
	if err := e.checkVersion(st); err != nil {
		// A newer layout may consist of more than this build would drop.
		return err
	}
	if len(st.Foreign) > 0 {
		return fmt.Errorf("dropping table %s: foreign partitions attached (%s); detach them first", e.table, strings.Join(st.Foreign, ", "))
	}
	// The registry and positions go first: a run cut short after them
	// leaves a table that EnsureTable (and Register) complete again, never
	// positions or a registry without a table.
	if err := e.dropUsers(ctx, conn); err != nil { // registry.go: a shared table's
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	if err := e.dropPositions(ctx, conn); err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	// DROP TABLE leaves the claim functions; left over, they would block a
	// later DROP SCHEMA without CASCADE.
	if err := e.dropClaim(ctx, conn); err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	// One partition per statement, then the parent: dropping a table frees
	// its files at commit, which takes time in proportion to their size, and
	// each statement must fit in the statement timeout. A run cut short
	// leaves an owned table with fewer partitions; the next one goes on.
	for _, p := range st.Partitions {
		if p.DetachPending {
			continue // dropped with the parent
		}
		child := pgx.Identifier{e.table.Schema, p.Name}.Sanitize()
		if err := e.ddl(ctx, conn, "dropping partition "+p.Name, "DROP TABLE "+child); err != nil {
			return fmt.Errorf("dropping table %s: %w", e.table, err)
		}
	}
	if err := e.ddl(ctx, conn, "dropping table "+e.table.String(), "DROP TABLE "+e.parent()); err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	for _, o := range st.Orphans {
		if err := e.dropDetached(ctx, conn, o); err != nil {
			return fmt.Errorf("dropping table %s: %w", e.table, err)
		}
	}
	// Last: the lock table's key guards everything above.
	if err := e.dropLockTable(ctx, conn); err != nil {
		return fmt.Errorf("dropping table %s: %w", e.table, err)
	}
	return nil
}
