package outbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Kind is the kind in the outbox table's marker (dedup.Marker.Kind).
const Kind = "outbox"

// Defaults of Table.
const (
	DefaultTableName = "outbox"
)

// Suffixes of the objects made beside the table <name>: the cursor table
// and the emit function. The maintenance lock is dedup's <name>_lock.
const (
	cursorSuffix = "_relay"
	emitSuffix   = "_emit"
)

// Table names an outbox table and its partition interval.
type Table struct {
	// Schema holds the table; default "public".
	Schema string
	// Name of the partitioned table; default "outbox", at most
	// dedup.MaxTableNameLen bytes.
	Name string
	// Interval is the span of one partition; default Daily.
	Interval dedup.Interval
}

// WithDefaults returns t with empty fields set to their defaults.
func (t Table) WithDefaults() Table {
	if t.Schema == "" {
		t.Schema = dedup.DefaultSchema
	}
	if t.Name == "" {
		t.Name = DefaultTableName
	}
	if t.Interval == "" {
		t.Interval = dedup.DefaultInterval
	}
	return t
}

// dedupTable is t as the partition engine's table (the scope is unused).
func (t Table) dedupTable() dedup.Table {
	t = t.WithDefaults()
	return dedup.Table{Schema: t.Schema, Name: t.Name, Scope: dedup.ScopeGlobal, Interval: t.Interval}
}

// Validate checks the identifiers and the interval, as dedup.Table does.
func (t Table) Validate() error {
	if err := t.dedupTable().Validate(); err != nil {
		return fmt.Errorf("invalid outbox table: %w", errors.Unwrap(err))
	}
	// The emit function notifies on <schema>.<name>: PostgreSQL refuses a
	// channel name of 64 bytes or more at every emit ("channel name too
	// long"), so such a table is refused here, not at the first event.
	if c := t.Channel(); len(c) > maxChannelLen {
		return fmt.Errorf("invalid outbox table: schema and name together (%q, %d bytes) must be at most %d bytes: they name its NOTIFY channel", c, len(c), maxChannelLen)
	}
	return nil
}

// maxChannelLen is the longest NOTIFY channel name PostgreSQL takes
// (NAMEDATALEN - 1).
const maxChannelLen = 63

// String is the qualified name, unquoted, for messages.
func (t Table) String() string { return t.dedupTable().String() }

func (t Table) ident() string {
	t = t.WithDefaults()
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

func (t Table) cursorIdent() string {
	t = t.WithDefaults()
	return pgx.Identifier{t.Schema, t.Name + cursorSuffix}.Sanitize()
}

// EmitFunction returns the schema-qualified name of the emit function,
// <schema>.<name>_emit (validated identifiers: usable in SQL as it is).
func (t Table) EmitFunction() string {
	t = t.WithDefaults()
	return t.Schema + "." + t.Name + emitSuffix
}

// Channel is the LISTEN/NOTIFY channel the emit function notifies on
// commit: the table's qualified name.
func (t Table) Channel() string { return t.String() }

// NewEngine returns the partition engine for t: dedup's Engine of kind
// "outbox", whose Maintain drops an expired partition only when every row in
// it is published (retention.go).
func NewEngine(pool *pgxpool.Pool, t Table, opts ...dedup.Option) (*dedup.Engine, error) {
	opts = append([]dedup.Option{dedup.WithKind(Kind), dedup.WithDropGuard(dropGuard(t.WithDefaults()))}, opts...)
	return dedup.NewEngine(pool, t.dedupTable(), opts...)
}

// EnsureOption changes what Ensure installs.
type EnsureOption func(*ensureOptions)

type ensureOptions struct {
	maxMessageBytes int
	topics          []string
	topicsSet       bool // WithTopics was given: the topic check is kept
}

// WithTopics sets the topics the outbox publishes to (an Outbox's
// spec.kafka.topics): the emit function refuses an event to any other
// (SQLSTATE 22023), in the emitting transaction, instead of a committed row
// that holds the relay's stream (the topic does not exist) or goes where the
// relay's Kafka identity may write and the emitter should not; the table's
// topic check (a trigger, topics.go) refuses a plain INSERT of one too.
// Empty: any topic. Without WithTopics, Ensure leaves the table's topic
// check as it is (none on a table it makes).
func WithTopics(topics []string) EnsureOption { // checked by Ensure (validTopic)
	return func(o *ensureOptions) { o.topics, o.topicsSet = append([]string(nil), topics...), true }
}

// WithMaxMessageBytes sets the largest record the emit function accepts:
// the relays' MaxMessageBytes (Config), default DefaultMaxMessageBytes. An
// event whose record would be larger (key, payload, the headers given and
// those the relay adds; estimated as the relay does, over rather than
// under) is refused in the emitting transaction, with SQLSTATE 54000,
// instead of holding the relay's stream once committed: the relay sends
// nothing larger. n <= 0: no limit.
func WithMaxMessageBytes(n int) EnsureOption {
	return func(o *ensureOptions) { o.maxMessageBytes = n }
}

// Ensure creates the outbox table (with its ownership marker for owner), its
// cursor table and the emit function, or checks that an existing table is
// an outbox of owner; the emit function is (re)installed every time. Like
// dedup's EnsureTable it makes no partition: call Maintain next. It runs
// under the table's maintenance lock. The topic check (topics.go) is
// installed or changed too; when its lock is not granted in time the rest is
// done and a *TopicCheckPendingError returned (call Ensure again later).
func Ensure(ctx context.Context, pool *pgxpool.Pool, t Table, owner string, opts ...EnsureOption) error {
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return err
	}
	o := ensureOptions{maxMessageBytes: DefaultMaxMessageBytes}
	for _, opt := range opts {
		opt(&o)
	}
	for _, tp := range o.topics {
		if !validTopic(tp) {
			return fmt.Errorf("ensuring outbox %s: invalid topic %q: a Kafka topic is 1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-', not '.' or '..'", t, tp)
		}
	}
	if err := dedup.ValidateOwner(owner); err != nil {
		return fmt.Errorf("ensuring outbox %s: %w", t, err)
	}
	eng, err := NewEngine(pool, t)
	if err != nil {
		return err
	}
	var pending error
	err = eng.Locked(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		st, err := eng.Observe(ctx)
		if err != nil {
			return err
		}
		if st.Exists {
			switch {
			case st.Owner != owner:
				return &dedup.OwnershipError{Table: t.String(), Owner: st.Owner}
			case st.Marker.Kind != Kind:
				return &dedup.LayoutError{Table: t.String(), Problems: []string{"not an outbox table (its marker names no kind " + Kind + ")"}}
			}
		} else if err := createTable(ctx, conn, t, owner); err != nil {
			return err
		}
		if err := ensureCursor(ctx, conn, t); err != nil {
			return err
		}
		// Without WithTopics the check stays as it is (a relay that
		// ensures its table must not widen what the table's owner set).
		if o.topicsSet {
			var tp *TopicCheckPendingError
			if err := ensureTopicCheck(ctx, conn, t, o.topics); errors.As(err, &tp) { // topics.go
				pending = err // the rest is done all the same
			} else if err != nil {
				return err
			}
		}
		// EXECUTE is PUBLIC's by default; Grant gives it to emitters.
		_, err = conn.Exec(ctx, emitFunctionSQL(t, o)+";\nREVOKE ALL ON FUNCTION "+emitIdent(t)+"(text, bytea, bytea, jsonb, text) FROM PUBLIC")
		if err != nil {
			return fmt.Errorf("installing %s: %w", t.EmitFunction(), err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ensuring outbox %s: %w", t, err)
	}
	return pending
}

// createTable makes the partitioned table in one implicit transaction (one
// simple-protocol string), so it never exists without its marker.
//
// The columns: tx is the inserting transaction's full id, which the relay
// compares with the snapshot's xmin horizon (window.go); the index on it is
// how the relay finds what is not yet published in every partition without
// a scan. created_at is the clock at the insert (clock_timestamp, not the
// transaction's start), for the latency histogram and the oldest-unpublished
// age. Nothing ever updates or deletes a row: retention drops partitions.
func createTable(ctx context.Context, conn *pgx.Conn, t Table, owner string) error {
	marker, err := dedup.MarkerComment(dedup.Marker{Owner: owner, Scope: dedup.ScopeGlobal, Interval: t.Interval, Version: 1, Kind: Kind})
	if err != nil {
		return err
	}
	// The schema is looked up first because CREATE SCHEMA IF NOT EXISTS
	// needs CREATE on the database even when the schema exists, and a DBA
	// may have made the schema for a role that has no such right.
	var schemaExists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, t.Schema).Scan(&schemaExists); err != nil {
		return fmt.Errorf("looking up schema: %w", err)
	}
	createSchema := ""
	if !schemaExists {
		createSchema = "CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{t.Schema}.Sanitize() + ";\n"
	}
	parent := t.ident()
	sql := createSchema + fmt.Sprintf(`CREATE TABLE %s (
	event_id uuid NOT NULL,
	topic text NOT NULL,
	key bytea,
	payload bytea,
	headers jsonb NOT NULL DEFAULT '{}'::jsonb,
	tx pg_catalog.xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
	created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	CONSTRAINT %s PRIMARY KEY (event_id)
) PARTITION BY RANGE (event_id);
CREATE INDEX %s ON %s (tx);
COMMENT ON TABLE %s IS %s`,
		parent, pgx.Identifier{t.Name + "_pkey"}.Sanitize(),
		pgx.Identifier{t.Name + "_tx"}.Sanitize(), parent, parent, marker)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("creating table: %w", err)
	}
	return nil
}

// ensureCursor makes the relay's cursor table with its one row: the random
// key of the relays' ownership lock and the cursor (cursor.go). The cursor
// starts at the horizon of the creating transaction, below every
// transaction that can insert into a table created by it.
func ensureCursor(ctx context.Context, conn *pgx.Conn, t Table) error {
	sql := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	one boolean NOT NULL DEFAULT true,
	lock_key bigint NOT NULL,
	lo pg_catalog.xid8 NOT NULL,
	hi pg_catalog.xid8 NOT NULL,
	after uuid,
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT %s PRIMARY KEY (one),
	CONSTRAINT %s CHECK (one AND lo <= hi)
);
REVOKE ALL ON TABLE %s FROM PUBLIC;
INSERT INTO %s (lock_key, lo, hi)
SELECT ('x' || pg_catalog.substr(pg_catalog.md5(pg_catalog.gen_random_uuid()::text), 1, 16))::bit(64)::bigint,
       pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()), pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())
ON CONFLICT DO NOTHING`,
		t.cursorIdent(), pgx.Identifier{t.Name + cursorSuffix + "_pk"}.Sanitize(), pgx.Identifier{t.Name + cursorSuffix + "_one"}.Sanitize(),
		t.cursorIdent(), t.cursorIdent())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("creating the cursor table: %w", err)
	}
	return nil
}

// topicRE is a Kafka topic name; the emit function's topic list is built
// from such names only (they are inside its dollar-quoted body).
var topicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func validTopic(t string) bool { return topicRE.MatchString(t) && t != "." && t != ".." }
