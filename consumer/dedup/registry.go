package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A shared table is used by several objects, each with its own consumer
// group (ScopeConsumerGroup only). Its ownership marker, and its partitions',
// name SharedOwner(t) instead of one object, so every user passes the
// marker checks of EnsureTable, Maintain and DropTable with the same owner
// string. Who uses it is recorded in its registry, the table <table>_users
// beside it: one row per user with its consumer group and the retention and
// premake it asks for. Maintain keeps the partitions with the longest
// retention and the largest premake registered, whoever calls it, and
// Leave drops the table only when its last user leaves.

// sharedOwnerPrefix starts the owner string of a shared table's marker. A
// Kubernetes UID never starts with it, so a shared table is never mistaken
// for one object's.
const sharedOwnerPrefix = "shared:"

// SharedOwner returns the owner string that the markers of a shared table
// carry: "shared:<schema>.<table>".
func SharedOwner(t Table) string { return sharedOwnerPrefix + t.String() }

// IsSharedOwner reports whether owner is the owner string of a shared table.
func IsSharedOwner(owner string) bool { return strings.HasPrefix(owner, sharedOwnerPrefix) }

// usersSuffix names the registry after the dedup table. Like "_offsets" it
// does not start with "_p", so it never looks like a partition, and with
// MaxTableNameLen it stays within MaxIdentifierLen (with "_group", the name
// of its unique constraint, too).
const usersSuffix = "_users"

// UsersTableName returns the name (in t's schema) of t's registry of users.
func UsersTableName(t Table) string { return t.WithDefaults().Name + usersSuffix }

// usersMarker is the COMMENT on the registry: it names the dedup table it
// belongs to, so a table of someone else's with the same name is never
// used or dropped.
type usersMarker struct {
	UsersOf string `json:"idempotency.dev/users-of"` // schema.table
	Version int    `json:"version"`
}

// User is one object registered on a shared table.
type User struct {
	// ID identifies the user (an object's UID); at most 253 characters, as
	// ValidateOwner accepts.
	ID string
	// Group is the user's consumer group. Two users cannot register the same
	// group: they would share one dedup history.
	Group string
	// Object names the user for people (namespace/name).
	Object string
	// Retention and Premake are the policy the user asks for.
	Retention time.Duration
	Premake   int
	// DropOnDelete: the user wants the table dropped when it leaves last.
	DropOnDelete bool
	// RegisteredAt is when the user first registered (read back only).
	RegisteredAt time.Time
}

// GroupInUseError refuses to register a consumer group that another user of
// the shared table has registered.
type GroupInUseError struct {
	Table  string // schema-qualified
	Group  string
	Holder string // the other user's Object
	ID     string // the other user's ID
}

// Error names the group, the table and the user holding it.
func (e *GroupInUseError) Error() string {
	return fmt.Sprintf("consumer group %q is already registered on shared table %s by %s (%s); each user of a shared table needs its own consumer group, or the two would share one dedup history",
		e.Group, e.Table, e.Holder, e.ID)
}

// EffectivePolicy is the policy a shared table is kept with: the longest
// retention and the largest premake of its users, and at least the given
// ones (the caller's own). Users with no retention or premake (zero) do not
// lower anything.
func EffectivePolicy(users []User, premake int, retention time.Duration) (int, time.Duration) {
	for _, u := range users {
		premake = max(premake, u.Premake)
		retention = max(retention, u.Retention)
	}
	return premake, retention
}

// Register records u as a user of the shared table (replacing its earlier
// row) and returns every user after it, oldest registration first. The
// table must exist with the shared owner's marker (*OwnershipError
// otherwise; EnsureTable with SharedOwner creates it); the registry is
// created with the first registration. Another user with u's group is
// refused with *GroupInUseError. It runs under the table's advisory lock,
// so it never interleaves with Leave dropping the table.
func (e *Engine) Register(ctx context.Context, u User) ([]User, error) {
	if err := ValidateOwner(u.ID); err != nil {
		return nil, fmt.Errorf("registering on %s: %w", e.table, err)
	}
	if u.Group == "" {
		return nil, fmt.Errorf("registering on %s: empty consumer group", e.table)
	}
	conn, release, err := e.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("registering on %s: %w", e.table, err)
	}
	defer release()
	if err := e.checkShared(ctx, conn); err != nil {
		return nil, fmt.Errorf("registering on %s: %w", e.table, err)
	}
	if err := e.ensureUsers(ctx, conn); err != nil {
		return nil, fmt.Errorf("registering on %s: %w", e.table, err)
	}
	users, err := e.readUsers(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("registering on %s: %w", e.table, err)
	}
	for _, o := range users {
		if o.Group == u.Group && o.ID != u.ID {
			return nil, &GroupInUseError{Table: e.table.String(), Group: u.Group, Holder: o.Object, ID: o.ID}
		}
	}
	// Only a change is written: every reconcile registers, and an unchanged
	// row need not be rewritten each time.
	if i := slices.IndexFunc(users, func(o User) bool { return o.ID == u.ID }); i >= 0 {
		o := users[i]
		if o.Group == u.Group && o.Object == u.Object && o.Retention == u.Retention && o.Premake == u.Premake && o.DropOnDelete == u.DropOnDelete {
			return users, nil
		}
	}
	qctx, cancel := e.bounded(ctx)
	_, err = conn.Exec(qctx, fmt.Sprintf(`
INSERT INTO %s (user_id, consumer_group, object, retention_seconds, premake, drop_on_delete)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (user_id) DO UPDATE
   SET consumer_group = EXCLUDED.consumer_group, object = EXCLUDED.object,
       retention_seconds = EXCLUDED.retention_seconds, premake = EXCLUDED.premake,
       drop_on_delete = EXCLUDED.drop_on_delete, updated_at = pg_catalog.now()`, e.usersIdent()),
		u.ID, u.Group, u.Object, int64(u.Retention/time.Second), u.Premake, u.DropOnDelete)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("registering on %s: %w", e.table, err)
	}
	if users, err = e.readUsers(ctx, conn); err != nil {
		return nil, fmt.Errorf("registering on %s: %w", e.table, err)
	}
	return users, nil
}

// Users returns the users registered on the table, oldest first; none when
// the table has no registry.
func (e *Engine) Users(ctx context.Context) ([]User, error) {
	conn, release, err := e.conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading users of %s: %w", e.table, err)
	}
	defer release(false)
	users, err := e.readUsers(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("reading users of %s: %w", e.table, err)
	}
	return users, nil
}

// LeaveResult reports what Leave did.
type LeaveResult struct {
	// Remaining are the users still registered, oldest first.
	Remaining []User
	// Dropped: the table was dropped (the last user left with drop).
	Dropped bool
	// WasRegistered: id had a row in the registry.
	WasRegistered bool
}

// Leave unregisters id from the shared table. When id was registered, no
// user remains and drop is set, it drops the table as DropTable does (its partitions, positions
// and registry). A missing table is not an error. Like Register it runs
// under the table's advisory lock: a user registering at the same time
// either comes first (and the table stays) or finds the table gone and
// creates it again.
func (e *Engine) Leave(ctx context.Context, id string, drop bool) (LeaveResult, error) {
	var res LeaveResult
	conn, release, err := e.session(ctx)
	if err != nil {
		return res, fmt.Errorf("leaving %s: %w", e.table, err)
	}
	defer release()
	st, err := e.observe(ctx, conn)
	if err != nil {
		return res, fmt.Errorf("leaving %s: %w", e.table, err)
	}
	if !st.Exists {
		return res, nil
	}
	if st.Owner != SharedOwner(e.table) {
		return res, fmt.Errorf("leaving %s: %w", e.table, &OwnershipError{Table: e.table.String(), Owner: st.Owner})
	}
	ok, err := e.checkUsers(ctx, conn)
	if err != nil {
		return res, fmt.Errorf("leaving %s: %w", e.table, err)
	}
	if ok {
		qctx, cancel := e.bounded(ctx)
		tag, err := conn.Exec(qctx, fmt.Sprintf(`DELETE FROM %s WHERE user_id = $1`, e.usersIdent()), id)
		cancel()
		if err != nil {
			return res, fmt.Errorf("leaving %s: %w", e.table, err)
		}
		res.WasRegistered = tag.RowsAffected() > 0
		if res.Remaining, err = e.readUsers(ctx, conn); err != nil {
			return res, fmt.Errorf("leaving %s: %w", e.table, err)
		}
	}
	// Only the last user's leaving drops the table: one that never
	// registered (deleted before it got that far) leaves it as it is, also
	// when nobody is registered any more (the last user kept it).
	if len(res.Remaining) > 0 || !drop || !res.WasRegistered {
		return res, nil
	}
	if err := e.dropTable(ctx, conn, SharedOwner(e.table)); err != nil {
		return res, err
	}
	res.Dropped = true
	return res, nil
}

// checkShared checks that the table exists and is shared.
func (e *Engine) checkShared(ctx context.Context, conn *pgx.Conn) error {
	st, err := e.observe(ctx, conn)
	if err != nil {
		return err
	}
	if !st.Exists {
		return ErrTableNotFound
	}
	if st.Owner != SharedOwner(e.table) {
		return &OwnershipError{Table: e.table.String(), Owner: st.Owner}
	}
	return nil
}

// sharedPolicy widens policy to the registered users' when the table is
// shared: Maintain's hook, so that no maintainer of a shared table, whatever
// it asks for, drops a partition another user still needs or premakes
// fewer than one asked for.
func (e *Engine) sharedPolicy(ctx context.Context, conn *pgx.Conn, st State, policy Policy) (Policy, error) {
	if !IsSharedOwner(st.Owner) {
		return policy, nil
	}
	users, err := e.readUsers(ctx, conn)
	if err != nil {
		return policy, err
	}
	policy.Premake, policy.Retention = EffectivePolicy(users, policy.Premake, policy.Retention)
	return policy, nil
}

func (e *Engine) usersName() string { return UsersTableName(e.table) }

func (e *Engine) usersIdent() string {
	return pgx.Identifier{e.table.Schema, e.usersName()}.Sanitize()
}

// ensureUsers creates the registry if it is missing.
func (e *Engine) ensureUsers(ctx context.Context, conn *pgx.Conn) error {
	ok, err := e.checkUsers(ctx, conn)
	if err != nil || ok {
		return err
	}
	marker, err := jsonLiteral(usersMarker{UsersOf: e.table.String(), Version: 1})
	if err != nil {
		return err
	}
	users := e.usersIdent()
	sql := fmt.Sprintf(`CREATE TABLE %s (
	user_id text NOT NULL,
	consumer_group text NOT NULL,
	object text NOT NULL,
	retention_seconds bigint NOT NULL,
	premake integer NOT NULL,
	drop_on_delete boolean NOT NULL,
	registered_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT %s PRIMARY KEY (user_id),
	CONSTRAINT %s UNIQUE (consumer_group)
);
COMMENT ON TABLE %s IS %s`, users, pgx.Identifier{e.usersName() + "_pk"}.Sanitize(),
		pgx.Identifier{e.usersName() + "_group"}.Sanitize(), users, marker)
	return e.ddl(ctx, conn, "creating registry "+e.usersName(), sql)
}

// checkUsers reports whether the registry exists and is ours; false with no
// error when the name is free, *NameConflictError when someone else's
// relation has it.
func (e *Engine) checkUsers(ctx context.Context, conn *pgx.Conn) (bool, error) {
	name := e.usersName()
	var comment *string
	qctx, cancel := e.bounded(ctx)
	err := conn.QueryRow(qctx, `
SELECT pg_catalog.obj_description(c.oid, 'pg_class')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'`, e.table.Schema, name).Scan(&comment)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		kind, of, err := e.nameTaken(ctx, conn, name)
		if err != nil || kind == "" {
			return false, err
		}
		return false, &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + name, Kind: kind, Of: of, Need: "the registry of the shared table's users"}
	}
	if err != nil {
		return false, fmt.Errorf("looking up registry %s: %w", name, err)
	}
	var m usersMarker
	if comment == nil || json.Unmarshal([]byte(*comment), &m) != nil || m.UsersOf != e.table.String() {
		return false, &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + name, Kind: "table", Need: "the registry of the shared table's users"}
	}
	return true, nil
}

// readUsers reads the registry; none when it does not exist.
func (e *Engine) readUsers(ctx context.Context, conn *pgx.Conn) ([]User, error) {
	ok, err := e.checkUsers(ctx, conn)
	if err != nil || !ok {
		return nil, err
	}
	qctx, cancel := e.bounded(ctx)
	defer cancel()
	rows, err := conn.Query(qctx, fmt.Sprintf(`
SELECT user_id, consumer_group, object, retention_seconds, premake, drop_on_delete, registered_at
  FROM %s ORDER BY registered_at, user_id`, e.usersIdent()))
	if err != nil {
		return nil, fmt.Errorf("reading registry %s: %w", e.usersName(), err)
	}
	users, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (User, error) {
		var (
			u   User
			ret int64
		)
		err := row.Scan(&u.ID, &u.Group, &u.Object, &ret, &u.Premake, &u.DropOnDelete, &u.RegisteredAt)
		u.Retention = time.Duration(ret) * time.Second
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading registry %s: %w", e.usersName(), err)
	}
	return users, nil
}

// dropUsers drops the registry if it is ours; DropTable calls it once it
// has established that the dedup table is ours.
func (e *Engine) dropUsers(ctx context.Context, conn *pgx.Conn) error {
	ok, err := e.checkUsers(ctx, conn)
	var nc *NameConflictError
	if errors.As(err, &nc) || !ok && err == nil {
		return nil // missing, or not ours: never touched
	}
	if err != nil {
		return err
	}
	return e.ddl(ctx, conn, "dropping registry "+e.usersName(), "DROP TABLE "+e.usersIdent())
}
