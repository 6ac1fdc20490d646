package migrate

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// Defaults of Config.
const (
	DefaultIDColumn          = "event_id"
	DefaultGroupColumn       = "consumer_group"
	DefaultProcessedAtColumn = "processed_at"
	DefaultLegacySuffix      = "_legacy"
	DefaultPremake           = 4
	DefaultRetention         = 168 * time.Hour
	DefaultBatchSize         = 10000
	// DefaultRenameLockTimeout bounds the wait for the legacy table's lock
	// when renaming it: a writer still using it makes the rename fail instead
	// of queueing every other query behind it.
	DefaultRenameLockTimeout = 5 * time.Second
	// DefaultLockTimeout bounds every wait for the legacy table's lock (the
	// rename, the sync trigger's creation and removal): its writers queue
	// behind a waiting ALTER or CREATE TRIGGER, so the wait must be short.
	DefaultLockTimeout = DefaultRenameLockTimeout
	// DefaultLockAttempts is how often DDL on the legacy table is tried
	// before giving up, pausing one lock timeout in between so the queued
	// writers get through.
	DefaultLockAttempts = 3
	// interruptedCountTimeout bounds the count of what an interrupted run
	// left in the new table (on a context of its own: the run's is gone).
	interruptedCountTimeout = 30 * time.Second
	// SyncTriggerName is the trigger Config.SyncTrigger installs on the
	// legacy table.
	SyncTriggerName = "idempotency_legacy_sync"
	// samples is how many ids of each skipped kind the report lists.
	samples = 5
)

// Config says what to migrate where.
type Config struct {
	// Table is the partitioned table to create or fill, as the
	// IdempotentConsumer's spec.database and spec.dedup describe it.
	Table dedup.Table
	// Premake and Retention are the spec's dedup.premake and
	// dedup.retention: the partitions created, and so the window copied.
	// Default 4 and 168h.
	Premake   int
	Retention time.Duration
	// Owner is the IdempotentConsumer's metadata.uid, written into the new
	// table's ownership marker. Needed only when the table does not exist
	// yet; an existing table must carry it (or any marker when empty).
	Owner string

	// LegacySchema and Legacy name the legacy table; default Table.Schema
	// and Table.Name.
	LegacySchema string
	Legacy       string
	// RenameTo is the legacy table's new name when it has the new table's
	// name; default Legacy + "_legacy". Its indexes named Legacy_* are
	// renamed to RenameTo_*.
	RenameTo string
	// IDColumn holds the event id (type uuid); default event_id.
	IDColumn string
	// GroupColumn holds the consumer group (any text type). Empty means
	// consumer_group if the legacy table has that column, else none; "-"
	// means none (every row gets Group, e.g. when the group id changes).
	GroupColumn string
	// ProcessedAtColumn holds the processing time (timestamptz, timestamp
	// or date). Empty means processed_at if present, else the copy time;
	// "-" means the copy time.
	ProcessedAtColumn string
	// Group is the consumer group recorded for rows without one: required
	// when the legacy table has no group column.
	Group string

	// BatchSize is the number of ids copied per statement and transaction.
	BatchSize int
	// DryRun reads and counts but changes nothing.
	DryRun bool
	// SyncTrigger installs an AFTER INSERT trigger on the legacy table that
	// copies every new row into the new table too, so that consumers still
	// writing the legacy table during a cut-over lose nothing. It needs the
	// legacy table to keep its name (a new table of another name). Remove
	// it with RemoveSyncTrigger once nothing writes the legacy table.
	SyncTrigger bool
	// Skipped, when set, receives a CSV line (event_id, consumer_group,
	// processed_at, reason) for every legacy row not copied. A dry run
	// writes nothing to it.
	Skipped io.Writer

	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives progress (default: discarded).
	Logger *slog.Logger
	// LockTimeout bounds each wait for a lock on the legacy table (its
	// rename, the sync trigger's creation and removal); LockAttempts is how
	// often that DDL is tried before Run gives up. Default 5s and 3.
	LockTimeout  time.Duration
	LockAttempts int
	// RenameLockTimeout is the former name of LockTimeout, used when
	// LockTimeout is zero.
	RenameLockTimeout time.Duration
	// ConfirmPartitionDrop lets Run drop partitions of an existing table
	// that hold rows, when Retention is shorter than the table's partitions
	// reach back (a re-run with a shorter retention than the first, or a
	// re-run after the oldest partitions expired). Without it Run refuses,
	// changing nothing, and names them.
	ConfirmPartitionDrop bool
}

// ErrInvalidConfig marks the errors of a Config that can never work (the
// command exits 2 for them).
var ErrInvalidConfig = errors.New("invalid migration")

// Reasons a legacy row is not copied, as in Report.Skipped and the CSV.
const (
	SkipNotV7  = "not_uuid_v7"       // null, or not version 7 with the RFC 9562 variant
	SkipTooOld = "older_than_window" // stamped before the oldest partition
	SkipTooNew = "newer_than_window" // stamped at or after the newest partition's end
	SkipInGap  = "in_partition_gap"  // between partitions (a foreign partition left a hole)
)

// Report says what Run did (or, with DryRun, would do).
type Report struct {
	DryRun bool
	// Source is the legacy table read (schema.name, after any rename).
	Source string
	// Renamed is set when the legacy table was renamed from the new
	// table's name to Source in this run; RenamedIndexes lists "old -> new".
	Renamed        bool
	RenamedIndexes []string
	// Target is the partitioned table; Created is set when this run created
	// it, PartitionsCreated lists the partitions this run created.
	Target            string
	Created           bool
	PartitionsCreated []string
	// Window is the range of producer times the partitions cover.
	Window dedup.Window
	// Rows is the number of legacy rows; Eligible of them are UUID v7 ids
	// inside a partition, and are (or would be) in the new table.
	Rows     int64
	Eligible int64
	// Copied were inserted by this run; the other eligible rows were there
	// already (an earlier run, the sync trigger, or the consumers).
	Copied int64
	// Skipped counts the rows not copied, by reason (Skip*); Samples lists
	// a few of their ids.
	Skipped map[string]int64
	Samples map[string][]string
	// Missing is the number of eligible rows not found in the new table
	// after the copy (verification; always 0 unless partitions were dropped
	// meanwhile). Not computed in a dry run.
	Missing int64
	// SyncTrigger names the trigger installed on the legacy table, if any.
	SyncTrigger string
	// LeftoverSyncTrigger names the trigger an earlier run installed,
	// found on the legacy table by a run without SyncTrigger: it still
	// copies every legacy insert until RemoveSyncTrigger.
	LeftoverSyncTrigger string
	// PartitionsDropped lists the partitions this run dropped (or, in a
	// dry run, would drop): their ranges are older than the retention.
	PartitionsDropped []string
	// Interrupted is set when the copy stopped before the end (the context
	// was cancelled, or a batch failed). Copied then counts the batches
	// committed before, and Missing, when Counted, what is still missing.
	Interrupted bool
	// Counted is set when Missing was counted (after a finished copy, or
	// after an interruption if the count itself succeeded).
	Counted bool
}

// SkippedTotal is the number of legacy rows not copied.
func (r *Report) SkippedTotal() int64 {
	var n int64
	for _, v := range r.Skipped {
		n += v
	}
	return n
}

// Write prints the report for people.
func (r *Report) Write(w io.Writer) {
	verb := func(done, would string) string {
		if r.DryRun {
			return would
		}
		return done
	}
	if r.DryRun {
		fmt.Fprintln(w, "dry run: nothing was changed")
	}
	if r.Interrupted {
		fmt.Fprintln(w, "INTERRUPTED: the copy did not finish; the counts below are what the new table holds now; run again to finish")
	}
	if r.Renamed {
		fmt.Fprintf(w, "legacy table %s to %s\n", verb("renamed", "would be renamed"), r.Source)
		for _, ix := range r.RenamedIndexes {
			fmt.Fprintf(w, "  index %s\n", ix)
		}
	} else {
		fmt.Fprintf(w, "legacy table: %s\n", r.Source)
	}
	switch {
	case r.Created:
		fmt.Fprintf(w, "partitioned table %s %s\n", r.Target, verb("created", "would be created"))
	default:
		fmt.Fprintf(w, "partitioned table %s exists\n", r.Target)
	}
	if len(r.PartitionsCreated) > 0 {
		fmt.Fprintf(w, "partitions %s: %d (%s .. %s)\n", verb("created", "to create"), len(r.PartitionsCreated),
			r.PartitionsCreated[0], r.PartitionsCreated[len(r.PartitionsCreated)-1])
	}
	if len(r.PartitionsDropped) > 0 {
		fmt.Fprintf(w, "partitions %s (older than the retention): %d (%s .. %s)\n", verb("dropped", "to drop"), len(r.PartitionsDropped),
			r.PartitionsDropped[0], r.PartitionsDropped[len(r.PartitionsDropped)-1])
	}
	fmt.Fprintf(w, "dedup window: %s\n", r.Window)
	fmt.Fprintf(w, "legacy rows: %d\n", r.Rows)
	switch {
	case r.DryRun:
		fmt.Fprintf(w, "  inside the window: %d (copied unless present already)\n", r.Eligible)
	case r.Interrupted && r.Counted:
		fmt.Fprintf(w, "  inside the window: %d (in %s now: %d; copied by this run: %d; still missing: %d)\n",
			r.Eligible, r.Target, r.Eligible-r.Missing, r.Copied, r.Missing)
	case r.Interrupted:
		fmt.Fprintf(w, "  inside the window: %d (copied by this run before the interruption: %d; what %s holds now could not be counted)\n",
			r.Eligible, r.Copied, r.Target)
	default:
		fmt.Fprintf(w, "  inside the window: %d (copied now %d, present already %d)\n", r.Eligible, r.Copied, r.Eligible-r.Copied)
	}
	fmt.Fprintf(w, "  not copied: %d\n", r.SkippedTotal())
	for _, k := range []string{SkipNotV7, SkipTooOld, SkipTooNew, SkipInGap} {
		if n := r.Skipped[k]; n > 0 {
			fmt.Fprintf(w, "    %s: %d, e.g. %s\n", k, n, strings.Join(r.Samples[k], ", "))
		}
	}
	if !r.DryRun && !r.Interrupted && r.Counted {
		fmt.Fprintf(w, "verification: %d eligible rows missing from %s\n", r.Missing, r.Target)
	}
	if r.SyncTrigger != "" {
		fmt.Fprintf(w, "sync trigger %s on %s %s: new legacy rows are copied too until it is removed\n",
			r.SyncTrigger, r.Source, verb("installed", "would be installed"))
	}
	if r.LeftoverSyncTrigger != "" {
		fmt.Fprintf(w, "sync trigger %s of an earlier run is still installed on %s: it copies every legacy insert; remove it with --remove-sync-trigger once nothing writes the legacy table\n",
			r.LeftoverSyncTrigger, r.Source)
	}
}

var groupRE = regexp.MustCompile(`^[a-zA-Z0-9._:-]{1,255}$`)

func (c Config) withDefaults() Config {
	c.Table = c.Table.WithDefaults()
	if c.LegacySchema == "" {
		c.LegacySchema = c.Table.Schema
	}
	if c.Legacy == "" {
		c.Legacy = c.Table.Name
	}
	if c.RenameTo == "" && c.sameName() {
		c.RenameTo = c.Legacy + DefaultLegacySuffix
	}
	if c.IDColumn == "" {
		c.IDColumn = DefaultIDColumn
	}
	if c.Premake == 0 {
		c.Premake = DefaultPremake
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = c.RenameLockTimeout
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = DefaultLockTimeout
	}
	if c.LockAttempts == 0 {
		c.LockAttempts = DefaultLockAttempts
	}
	return c
}

// sameName reports whether the legacy table has the new table's name, so it
// must be renamed out of the way.
func (c Config) sameName() bool {
	return c.LegacySchema == c.Table.Schema && c.Legacy == c.Table.Name
}

// Validate applies the defaults and checks the Config without a database:
// the errors Run would return before touching one, marked ErrInvalidConfig.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	var errs []error
	if err := c.Table.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := dedup.ValidatePolicy(c.Table.Interval, c.Premake, c.Retention); err != nil {
		errs = append(errs, err)
	}
	if c.Owner != "" {
		if err := dedup.ValidateOwner(c.Owner); err != nil {
			errs = append(errs, fmt.Errorf("owner: %w", err))
		}
	}
	if c.sameName() {
		if err := dedup.ValidateIdentifier(c.RenameTo); err != nil {
			errs = append(errs, fmt.Errorf("rename-to: %w", err))
		} else if c.RenameTo == c.Table.Name {
			errs = append(errs, errors.New("rename-to: must differ from the table's name"))
		}
		if c.SyncTrigger {
			errs = append(errs, errors.New("sync trigger: the legacy table must keep its name for its writers, so migrate into a table of another name (or stop the writers and migrate without the trigger)"))
		}
	} else if c.RenameTo != "" {
		errs = append(errs, errors.New("rename-to: only used when the legacy table has the new table's name"))
	}
	for field, v := range map[string]string{"legacy schema": c.LegacySchema, "legacy table": c.Legacy, "id column": c.IDColumn} {
		if v == "" || len(v) > dedup.MaxIdentifierLen || strings.ContainsRune(v, 0) {
			errs = append(errs, fmt.Errorf("%s: %q is not a PostgreSQL name", field, v))
		}
	}
	if c.Group != "" && !groupRE.MatchString(c.Group) {
		errs = append(errs, fmt.Errorf("group: %q is not a Kafka consumer group id", c.Group))
	}
	if c.BatchSize < 1 || c.BatchSize > 1_000_000 {
		errs = append(errs, fmt.Errorf("batch size: %d is not between 1 and 1000000", c.BatchSize))
	}
	if c.LockTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("lock timeout: %s is less than 1ms", c.LockTimeout))
	}
	if c.LockAttempts < 1 || c.LockAttempts > 100 {
		errs = append(errs, fmt.Errorf("lock attempts: %d is not between 1 and 100", c.LockAttempts))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// relation is a table as found in pg_catalog.
type relation struct {
	exists bool
	oid    uint32
	kind   string // r, p, v, ...
	marker dedup.Marker
}

func lookup(ctx context.Context, q querier, schema, name string) (relation, error) {
	var (
		r       relation
		comment *string
	)
	err := q.QueryRow(ctx, `
SELECT c.oid, c.relkind::text, obj_description(c.oid, 'pg_class')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2`, schema, name).Scan(&r.oid, &r.kind, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("looking up %s.%s: %w", schema, name, err)
	}
	r.exists = true
	if comment != nil {
		_ = json.Unmarshal([]byte(*comment), &r.marker) // not JSON: not a marker
	}
	return r, nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// source is the legacy table as the copy reads it.
type source struct {
	schema, name string
	rel          relation
	id           string // quoted column names; group and at may be ""
	group, at    string
}

func (s source) ident() string  { return pgx.Identifier{s.schema, s.name}.Sanitize() }
func (s source) String() string { return s.schema + "." + s.name }

// locate finds the legacy table, renamed or not, and says whether it still
// has to be renamed.
func locate(ctx context.Context, q querier, c Config) (src source, rename bool, err error) {
	legacy, err := lookup(ctx, q, c.LegacySchema, c.Legacy)
	if err != nil {
		return src, false, err
	}
	isLegacy := func(r relation) bool { return r.exists && (r.kind == "r" || r.kind == "p") && r.marker.Owner == "" }
	if !c.sameName() {
		if !isLegacy(legacy) {
			return src, false, fmt.Errorf("legacy table %s.%s: %s", c.LegacySchema, c.Legacy, describe(legacy))
		}
		return source{schema: c.LegacySchema, name: c.Legacy, rel: legacy}, false, nil
	}
	renamed, err := lookup(ctx, q, c.LegacySchema, c.RenameTo)
	if err != nil {
		return src, false, err
	}
	switch {
	case isLegacy(legacy) && !renamed.exists:
		return source{schema: c.LegacySchema, name: c.Legacy, rel: legacy}, true, nil
	case isLegacy(renamed) && (!legacy.exists || legacy.marker.Owner != ""):
		// Renamed by an earlier run; the new table may exist already.
		return source{schema: c.LegacySchema, name: c.RenameTo, rel: renamed}, false, nil
	case isLegacy(legacy) && renamed.exists:
		return src, false, fmt.Errorf("cannot rename %s.%s to %s: a relation of that name exists; choose another with RenameTo",
			c.LegacySchema, c.Legacy, c.RenameTo)
	default:
		return src, false, fmt.Errorf("no legacy table: %s.%s is %s and %s.%s is %s",
			c.LegacySchema, c.Legacy, describe(legacy), c.LegacySchema, c.RenameTo, describe(renamed))
	}
}

func describe(r relation) string {
	switch {
	case !r.exists:
		return "missing"
	case r.marker.Owner != "":
		return "already a dedup table (it carries an ownership marker)"
	case r.kind != "r" && r.kind != "p":
		return fmt.Sprintf("not a table (relkind %s)", r.kind)
	}
	return "a legacy table"
}

// columns resolves and checks the legacy table's columns.
func columns(ctx context.Context, q querier, c Config, src *source) (hasIndex bool, err error) {
	rows, err := q.Query(ctx, `
SELECT a.attname::text, a.atttypid::regtype::text,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indkey[0] = a.attnum)
  FROM pg_attribute a
 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, src.rel.oid)
	if err != nil {
		return false, fmt.Errorf("reading the columns of %s: %w", src, err)
	}
	type col struct {
		typ     string
		indexed bool
	}
	cols := map[string]col{}
	for rows.Next() {
		var (
			name string
			cl   col
		)
		if err := rows.Scan(&name, &cl.typ, &cl.indexed); err != nil {
			rows.Close()
			return false, fmt.Errorf("reading the columns of %s: %w", src, err)
		}
		cols[name] = cl
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("reading the columns of %s: %w", src, err)
	}
	id, ok := cols[c.IDColumn]
	switch {
	case !ok:
		return false, fmt.Errorf("legacy table %s has no column %q (set the id column)", src, c.IDColumn)
	case id.typ != "uuid":
		return false, fmt.Errorf("legacy column %s.%s is %s, not uuid: convert it first (ALTER TABLE ... ALTER COLUMN %s TYPE uuid USING %s::uuid)",
			src, c.IDColumn, id.typ, c.IDColumn, c.IDColumn)
	}
	src.id = pgx.Identifier{c.IDColumn}.Sanitize()

	pick := func(explicit, dflt, what string, types ...string) (string, error) {
		name := explicit
		if name == "-" {
			return "", nil
		}
		if name == "" {
			if _, ok := cols[dflt]; !ok {
				return "", nil
			}
			name = dflt
		}
		cl, ok := cols[name]
		if !ok {
			return "", fmt.Errorf("legacy table %s has no %s column %q", src, what, name)
		}
		if !slices.Contains(types, cl.typ) {
			return "", fmt.Errorf("legacy %s column %s.%s is %s, not one of %s", what, src, name, cl.typ, strings.Join(types, ", "))
		}
		return pgx.Identifier{name}.Sanitize(), nil
	}
	if src.group, err = pick(c.GroupColumn, DefaultGroupColumn, "group", "text", "character varying", "character", "name"); err != nil {
		return false, err
	}
	if src.at, err = pick(c.ProcessedAtColumn, DefaultProcessedAtColumn, "processed-at",
		"timestamp with time zone", "timestamp without time zone", "date"); err != nil {
		return false, err
	}
	if src.group == "" && c.Group == "" {
		return false, fmt.Errorf("legacy table %s has no consumer group column: say which group its rows belong to (Group)", src)
	}
	return id.indexed, nil
}

// v7 is the SQL test for a UUID v7 with the RFC 9562 variant (the only ids
// the consumer runtime accepts), on the text form, which is lower-case.
func v7(col string) string {
	return fmt.Sprintf(`(%[1]s IS NOT NULL AND substr(%[1]s::text, 15, 1) = '7' AND substr(%[1]s::text, 20, 1) IN ('8', '9', 'a', 'b'))`, col)
}

// groupExpr and atExpr are the values written for a legacy row r; $n is the
// parameter holding Config.Group.
func (s source) groupExpr(r, param string) string {
	if s.group == "" {
		return param
	}
	return fmt.Sprintf("COALESCE(%s.%s::text, %s)", r, s.group, param)
}

func (s source) atExpr(r string) string {
	if s.at == "" {
		return "now()"
	}
	return fmt.Sprintf("COALESCE(%s.%s::timestamptz, now())", r, s.at)
}

// keyRange is a uuid range [lo, hi) that accepts inserts.
type keyRange struct{ lo, hi uuid.UUID }

// ranges merges the attached partitions (not pending detach) into maximal
// contiguous uuid ranges. A DEFAULT partition is ignored: the project never
// creates one, and rows outside every bounded partition are reported.
func ranges(ps []dedup.ObservedPartition) []keyRange {
	var rs []keyRange
	for _, p := range ps {
		if p.DetachPending || p.Default {
			continue
		}
		r := keyRange{lo: p.From, hi: p.To}
		if p.FromMin {
			r.lo = uuid.Nil
		}
		if p.ToMax {
			r.hi = uuid.Max
		}
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b keyRange) int { return bytes.Compare(a.lo[:], b.lo[:]) })
	var out []keyRange
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].hi == r.lo {
			out[n-1].hi = r.hi
			continue
		}
		out = append(out, r)
	}
	return out
}

func window(rs []keyRange) dedup.Window {
	if len(rs) == 0 {
		return dedup.Window{}
	}
	return dedup.Window{From: dedup.EventTime(rs[0].lo), To: dedup.EventTime(rs[len(rs)-1].hi)}
}

func bounds(rs []keyRange) (los, his []uuid.UUID) {
	for _, r := range rs {
		los, his = append(los, r.lo), append(his, r.hi)
	}
	return los, his
}

// Run migrates the legacy table into the partitioned table; see the package
// documentation. It is safe to run again: done steps are skipped and rows
// already copied are left alone.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	eng, err := dedup.NewEngine(pool, cfg.Table)
	if err != nil {
		return nil, err
	}
	rep := &Report{DryRun: cfg.DryRun, Target: cfg.Table.String(), Skipped: map[string]int64{}, Samples: map[string][]string{}}

	src, rename, err := locate(ctx, pool, cfg)
	if err != nil {
		return nil, err
	}
	hasIndex, err := columns(ctx, pool, cfg, &src)
	if err != nil {
		return nil, err
	}
	if !hasIndex {
		log.Warn("the legacy id column leads no index: every batch scans the whole table", "table", src.String())
	}

	// Check the owner before changing anything.
	var st dedup.State
	if !rename { // else the legacy table still has the name: the table is to be created
		if st, err = eng.Observe(ctx); err != nil {
			return nil, err
		}
	}
	owner := cfg.Owner
	if owner == "" {
		owner = st.Owner
	}
	switch {
	case st.Exists && (st.Owner == "" || cfg.Owner != "" && st.Owner != cfg.Owner):
		return nil, &dedup.OwnershipError{Table: cfg.Table.String(), Owner: st.Owner}
	case !st.Exists && owner == "":
		return nil, fmt.Errorf("creating %s needs the owner: the IdempotentConsumer's metadata.uid (kubectl get ic NAME -o jsonpath='{.metadata.uid}')", cfg.Table)
	}
	// An existing table is used as it is: partitions the retention would
	// drop are dropped only when they are empty or the drop is confirmed.
	now := cfg.Now()
	if st.Exists {
		drop := dedup.PlanPartitions(now, cfg.Table.Interval, cfg.Premake, cfg.Retention, cfg.Table.Name, st.Partitions).Drop
		for _, p := range drop {
			rep.PartitionsDropped = append(rep.PartitionsDropped, p.Name)
		}
		if err := checkDrops(ctx, pool, cfg, drop); err != nil {
			return nil, err
		}
	}

	// Rename the legacy table (and its indexes) out of the new table's way.
	if rename {
		rep.Renamed = true
		newIdx, err := renamedIndexes(ctx, pool, src, cfg.RenameTo)
		if err != nil {
			return nil, err
		}
		for _, ix := range newIdx {
			rep.RenamedIndexes = append(rep.RenamedIndexes, ix.from+" -> "+ix.to)
		}
		if !cfg.DryRun {
			if err := renameLegacy(ctx, pool, cfg, src, newIdx); err != nil {
				return nil, err
			}
			log.Info("renamed the legacy table", "from", src.String(), "to", cfg.LegacySchema+"."+cfg.RenameTo)
			src.name = cfg.RenameTo
		}
		rep.Source = cfg.LegacySchema + "." + cfg.RenameTo
	} else {
		rep.Source = src.String()
	}

	// Create the partitioned table and its partitions.
	rep.Created = !st.Exists
	var rs []keyRange
	if cfg.DryRun {
		plan := dedup.PlanPartitions(now, cfg.Table.Interval, cfg.Premake, cfg.Retention, cfg.Table.Name, st.Partitions)
		after := slices.DeleteFunc(slices.Clone(st.Partitions), func(p dedup.ObservedPartition) bool {
			return slices.ContainsFunc(plan.Drop, func(d dedup.Partition) bool { return d.Name == p.Name })
		})
		for _, p := range plan.Create {
			lo, hi := p.Bounds()
			after = append(after, dedup.ObservedPartition{Name: p.Name, From: lo, To: hi})
			rep.PartitionsCreated = append(rep.PartitionsCreated, p.Name)
		}
		rs = ranges(after)
	} else {
		if err := eng.EnsureTable(ctx, owner); err != nil {
			return nil, err
		}
		res, err := eng.Maintain(ctx, now, cfg.Premake, cfg.Retention)
		if err != nil {
			return nil, err
		}
		for _, p := range res.Created {
			rep.PartitionsCreated = append(rep.PartitionsCreated, p.Name)
		}
		rep.PartitionsDropped = nil
		for _, p := range res.Dropped {
			rep.PartitionsDropped = append(rep.PartitionsDropped, p.Name)
		}
		if st, err = eng.Observe(ctx); err != nil {
			return nil, err
		}
		rs = ranges(st.Partitions)
		log.Info("partitioned table ready", "table", rep.Target, "created", rep.Created, "partitionsCreated", len(res.Created))
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s has no partitions to copy into", cfg.Table)
	}
	rep.Window = window(rs)

	if cfg.SyncTrigger {
		rep.SyncTrigger = SyncTriggerName
		if !cfg.DryRun {
			if err := installSyncTrigger(ctx, pool, cfg, src); err != nil {
				return nil, err
			}
			log.Info("sync trigger installed", "trigger", SyncTriggerName, "table", src.String())
		}
	} else {
		var left bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1 AND tgname = $2)`,
			src.rel.oid, SyncTriggerName).Scan(&left); err != nil {
			return nil, fmt.Errorf("looking for a sync trigger on %s: %w", src, err)
		}
		if left {
			rep.LeftoverSyncTrigger = SyncTriggerName
			log.Warn("the sync trigger of an earlier run is still installed; remove it with --remove-sync-trigger once nothing writes the legacy table",
				"trigger", SyncTriggerName, "table", src.String())
		}
	}

	if err := count(ctx, pool, cfg, src, rs, rep); err != nil {
		return nil, err
	}
	if !cfg.DryRun {
		for _, r := range rs {
			if err := copyRange(ctx, pool, cfg, src, r, rep); err != nil {
				// Say what the table holds now, not what a finished copy
				// would have: count on a context of its own, as ctx may be
				// the one that was cancelled.
				rep.Interrupted = true
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptedCountTimeout)
				defer cancel()
				if cerr := countMissing(cctx, pool, cfg, src, rs, rep); cerr != nil {
					log.Warn("counting the rows copied before the interruption", "error", cerr)
				}
				return rep, err
			}
		}
		if err := verify(ctx, pool, cfg, src, rs, rep); err != nil {
			return rep, err
		}
		log.Info("copy done", "eligible", rep.Eligible, "copied", rep.Copied, "skipped", rep.SkippedTotal(), "missing", rep.Missing)
	}
	if cfg.Skipped != nil && !cfg.DryRun {
		if err := writeSkipped(ctx, pool, cfg, src, rs, cfg.Skipped); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// classify is a query over the legacy table with each row's id, group,
// processing time and reason for not copying it (NULL when it is copied).
// $1 and $2 are the lower and upper bounds of the ranges, $3 and $4 arrays of
// their bounds, $5 Config.Group.
func classify(src source) string {
	return fmt.Sprintf(`
SELECT id, grp, at,
       CASE WHEN NOT is_v7 THEN '%s'
            WHEN covered THEN NULL
            WHEN id < $1 THEN '%s'
            WHEN id >= $2 THEN '%s'
            ELSE '%s' END AS reason
  FROM (SELECT s.%s AS id, %s AS grp, %s AS at, %s AS is_v7,
               EXISTS (SELECT 1 FROM unnest($3::uuid[], $4::uuid[]) r(lo, hi) WHERE s.%s >= r.lo AND s.%s < r.hi) AS covered
          FROM %s s) x`,
		SkipNotV7, SkipTooOld, SkipTooNew, SkipInGap,
		src.id, src.groupExpr("s", "$5::text"), src.atExpr("s"), v7("s."+src.id), src.id, src.id, src.ident())
}

func classifyArgs(cfg Config, rs []keyRange) []any {
	los, his := bounds(rs)
	return []any{rs[0].lo, rs[len(rs)-1].hi, los, his, cfg.Group}
}

// count fills the report's totals and samples.
func count(ctx context.Context, q querier, cfg Config, src source, rs []keyRange, rep *Report) error {
	rows, err := q.Query(ctx, `SELECT coalesce(reason, ''), count(*) FROM (`+classify(src)+`) c GROUP BY 1`, classifyArgs(cfg, rs)...)
	if err != nil {
		return fmt.Errorf("counting the rows of %s: %w", src, err)
	}
	for rows.Next() {
		var (
			reason string
			n      int64
		)
		if err := rows.Scan(&reason, &n); err != nil {
			rows.Close()
			return fmt.Errorf("counting the rows of %s: %w", src, err)
		}
		rep.Rows += n
		if reason == "" {
			rep.Eligible = n
		} else {
			rep.Skipped[reason] = n
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("counting the rows of %s: %w", src, err)
	}
	for reason, n := range rep.Skipped {
		if n == 0 {
			continue
		}
		ids, err := queryStrings(ctx, q, `SELECT coalesce(id::text, 'NULL') FROM (`+classify(src)+`) c WHERE reason = $6 ORDER BY id LIMIT $7`,
			append(classifyArgs(cfg, rs), reason, samples)...)
		if err != nil {
			return fmt.Errorf("sampling the rows of %s: %w", src, err)
		}
		rep.Samples[reason] = ids
	}
	return nil
}

// queryStrings runs a query returning one text column.
func queryStrings(ctx context.Context, q querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// copyRange copies the eligible rows of one range in batches, each its own
// transaction: INSERT ... SELECT ... ON CONFLICT DO NOTHING, so rows present
// already (an earlier run, the sync trigger, the consumers) are left alone.
func copyRange(ctx context.Context, q querier, cfg Config, src source, r keyRange, rep *Report) error {
	target := pgx.Identifier{cfg.Table.Schema, cfg.Table.Name}.Sanitize()
	next := func(op string) string {
		// The last id of the next batch (uuid has no max aggregate).
		return fmt.Sprintf(`SELECT id FROM (SELECT s.%[1]s AS id FROM %[2]s s WHERE s.%[1]s %[3]s $1 AND s.%[1]s < $2 ORDER BY s.%[1]s LIMIT $3) b ORDER BY id DESC LIMIT 1`,
			src.id, src.ident(), op)
	}
	insert := func(op string) string {
		return fmt.Sprintf(`
WITH ins AS (
  INSERT INTO %[1]s (event_id, consumer_group, processed_at)
  SELECT s.%[2]s, %[3]s, %[4]s FROM %[5]s s
   WHERE s.%[2]s %[6]s $1 AND s.%[2]s <= $2 AND %[7]s
  ON CONFLICT DO NOTHING RETURNING 1)
SELECT count(*) FROM ins`, target, src.id, src.groupExpr("s", "$3::text"), src.atExpr("s"), src.ident(), op, v7("s."+src.id))
	}
	from, op := r.lo, ">="
	for {
		var last pgtype.UUID
		err := q.QueryRow(ctx, next(op), from, r.hi, cfg.BatchSize).Scan(&last)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("copying from %s: finding the next batch: %w", src, err)
		}
		var n int64
		if err := q.QueryRow(ctx, insert(op), from, uuid.UUID(last.Bytes), cfg.Group).Scan(&n); err != nil {
			return fmt.Errorf("copying from %s into %s: %w", src, cfg.Table, err)
		}
		rep.Copied += n
		cfg.Logger.Debug("batch copied", "upTo", uuid.UUID(last.Bytes).String(), "inserted", n)
		from, op = uuid.UUID(last.Bytes), ">"
	}
}

// verify counts the eligible legacy rows that have no dedup row, and fails
// when there are any.
func verify(ctx context.Context, q querier, cfg Config, src source, rs []keyRange, rep *Report) error {
	if err := countMissing(ctx, q, cfg, src, rs, rep); err != nil {
		return err
	}
	if rep.Missing > 0 {
		return fmt.Errorf("verifying the copy: %d eligible rows of %s are missing from %s (a partition dropped meanwhile?); run again", rep.Missing, src, cfg.Table)
	}
	return nil
}

// countMissing sets the report's Missing (and Counted): the eligible legacy
// rows without a dedup row.
func countMissing(ctx context.Context, q querier, cfg Config, src source, rs []keyRange, rep *Report) error {
	match := "t.event_id = c.id"
	if cfg.Table.Scope == dedup.ScopeConsumerGroup {
		match += " AND t.consumer_group = c.grp"
	}
	sql := fmt.Sprintf(`SELECT count(*) FROM (%s) c WHERE c.reason IS NULL AND NOT EXISTS (SELECT 1 FROM %s t WHERE %s)`,
		classify(src), pgx.Identifier{cfg.Table.Schema, cfg.Table.Name}.Sanitize(), match)
	if err := q.QueryRow(ctx, sql, classifyArgs(cfg, rs)...).Scan(&rep.Missing); err != nil {
		return fmt.Errorf("verifying the copy: %w", err)
	}
	rep.Counted = true
	return nil
}

// checkDrops refuses, unless Config.ConfirmPartitionDrop, partitions the
// retention would drop that hold rows (migrated ones, or the consumers').
func checkDrops(ctx context.Context, q querier, cfg Config, drop []dedup.Partition) error {
	if cfg.ConfirmPartitionDrop || len(drop) == 0 {
		return nil
	}
	var (
		full []string
		rows int64
	)
	for _, p := range drop {
		var n int64
		if err := q.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{cfg.Table.Schema, p.Name}.Sanitize()).Scan(&n); err != nil {
			return fmt.Errorf("counting the rows of partition %s: %w", p.Name, err)
		}
		if n > 0 {
			full, rows = append(full, p.Name), rows+n
		}
	}
	if len(full) == 0 {
		return nil
	}
	return fmt.Errorf("refusing to drop %d partition(s) of %s holding %d rows (%s): retention %s ends after them, and an existing table is used as it is; "+
		"run with the retention of the IdempotentConsumer's spec.dedup.retention (the one used before), or, if these rows are meant to go (they are older than that retention), "+
		"confirm with ConfirmPartitionDrop (--confirm-partition-drop)",
		len(full), cfg.Table, rows, strings.Join(full, ", "), cfg.Retention)
}

// writeSkipped writes the rows not copied as CSV.
func writeSkipped(ctx context.Context, q querier, cfg Config, src source, rs []keyRange, w io.Writer) error {
	rows, err := q.Query(ctx, `SELECT coalesce(id::text, ''), grp, at, reason FROM (`+classify(src)+`) c WHERE reason IS NOT NULL ORDER BY reason, id`,
		classifyArgs(cfg, rs)...)
	if err != nil {
		return fmt.Errorf("listing skipped rows: %w", err)
	}
	defer rows.Close()
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"event_id", "consumer_group", "processed_at", "reason"}); err != nil {
		return err
	}
	for rows.Next() {
		var (
			id, reason string
			grp        *string
			at         time.Time
		)
		if err := rows.Scan(&id, &grp, &at, &reason); err != nil {
			return fmt.Errorf("listing skipped rows: %w", err)
		}
		g := ""
		if grp != nil {
			g = *grp
		}
		if err := cw.Write([]string{id, g, at.UTC().Format(time.RFC3339Nano), reason}); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("listing skipped rows: %w", err)
	}
	cw.Flush()
	return cw.Error()
}

type indexRename struct{ from, to string }

// renamedIndexes plans the new names of the legacy table's indexes named
// after it (its primary key index is <table>_pkey, which the new table needs).
func renamedIndexes(ctx context.Context, q querier, src source, renameTo string) ([]indexRename, error) {
	names, err := queryStrings(ctx, q, `
SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = $1 ORDER BY 1`, src.rel.oid)
	if err != nil {
		return nil, fmt.Errorf("listing the indexes of %s: %w", src, err)
	}
	var out []indexRename
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, src.name+"_")
		if !ok {
			continue
		}
		to := renameTo + "_" + rest
		if len(to) > dedup.MaxIdentifierLen {
			// Keep it unique and within the limit instead of letting the
			// server truncate it.
			h := fnv.New32a()
			h.Write([]byte(n))
			suffix := fmt.Sprintf("_%08x", h.Sum32())
			to = to[:dedup.MaxIdentifierLen-len(suffix)] + suffix
		}
		out = append(out, indexRename{from: n, to: to})
	}
	return out, nil
}

// legacyDDL runs fn, DDL on the legacy table, in a transaction whose
// lock_timeout is Config.LockTimeout: while the DDL waits for a writer's
// transaction, every other writer queues behind it, so it must give up soon
// (and let them through) rather than wait as long as the open transaction
// lasts. A lock timeout is retried up to Config.LockAttempts times, one
// lock timeout apart.
func legacyDDL(ctx context.Context, pool *pgxpool.Pool, cfg Config, src source, what string, fn func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", cfg.LockTimeout.Milliseconds())); err != nil {
				return err
			}
			return fn(tx)
		})
		if err == nil || !dedup.IsLockTimeout(err) {
			return err
		}
		if attempt >= cfg.LockAttempts {
			return fmt.Errorf("%s: %s is in use: another transaction held its lock through %d attempts of %s lock timeout (a writer with a long or idle open transaction?); "+
				"end that transaction or stop the writers, or raise the lock timeout, then run again: %w", what, src, attempt, cfg.LockTimeout, err)
		}
		cfg.Logger.Warn("the legacy table is locked; retrying", "what", what, "table", src.String(), "attempt", attempt, "lockTimeout", cfg.LockTimeout)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cfg.LockTimeout):
		}
	}
}

// renameLegacy renames the table and its indexes in one transaction, with
// legacyDDL's lock timeout and retries.
func renameLegacy(ctx context.Context, pool *pgxpool.Pool, cfg Config, src source, idx []indexRename) error {
	return legacyDDL(ctx, pool, cfg, src, "renaming the legacy table", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s RENAME TO %s", src.ident(), pgx.Identifier{cfg.RenameTo}.Sanitize())); err != nil {
			return fmt.Errorf("renaming %s: %w", src, err)
		}
		for _, ix := range idx {
			// Renaming a constraint's index renames the constraint too.
			if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER INDEX %s RENAME TO %s",
				pgx.Identifier{src.schema, ix.from}.Sanitize(), pgx.Identifier{ix.to}.Sanitize())); err != nil {
				return fmt.Errorf("renaming index %s of %s: %w", ix.from, src, err)
			}
		}
		return nil
	})
}

// syncFunction is the trigger function's name: one per target table.
func syncFunction(cfg Config) pgx.Identifier {
	return pgx.Identifier{cfg.LegacySchema, cfg.Table.Name + "_legacy_sync"}
}

// installSyncTrigger makes every row inserted into the legacy table from now
// on be copied into the new table in the same transaction. A row whose id has
// no partition is left in the legacy table only (the copy reports those);
// any other failure is a warning, never an error for the legacy writer.
func installSyncTrigger(ctx context.Context, pool *pgxpool.Pool, cfg Config, src source) error {
	// groupRE admits no quote or backslash, so the group is a plain literal.
	body := strings.NewReplacer(
		"$V7", v7("NEW."+src.id),
		"$TARGET", pgx.Identifier{cfg.Table.Schema, cfg.Table.Name}.Sanitize(),
		"$NAME", "'"+cfg.Table.String()+"'",
		"$ID", "NEW."+src.id,
		"$GROUP", src.groupExpr("NEW", "'"+cfg.Group+"'"),
		"$AT", src.atExpr("NEW"),
	).Replace(`
BEGIN
  IF $V7 THEN
    BEGIN
      INSERT INTO $TARGET (event_id, consumer_group, processed_at)
      VALUES ($ID, $GROUP, $AT)
      ON CONFLICT DO NOTHING;
    EXCEPTION
      WHEN check_violation THEN NULL; -- no partition for this id: outside the dedup window
      WHEN OTHERS THEN RAISE WARNING 'idempotency legacy sync into %: % (SQLSTATE %)', $NAME, SQLERRM, SQLSTATE;
    END;
  END IF;
  RETURN NULL;
END`)
	fn := syncFunction(cfg).Sanitize()
	return legacyDDL(ctx, pool, cfg, src, "installing the sync trigger", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $idempotency_sync$%s$idempotency_sync$", fn, body)); err != nil {
			return fmt.Errorf("creating the sync trigger function: %w", err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE OR REPLACE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()",
			pgx.Identifier{SyncTriggerName}.Sanitize(), src.ident(), fn)); err != nil {
			return fmt.Errorf("creating the sync trigger on %s: %w", src, err)
		}
		return nil
	})
}

// RemoveSyncTrigger drops the trigger and function Config.SyncTrigger
// installed; it does nothing when they are gone already.
func RemoveSyncTrigger(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	src, _, err := locate(ctx, pool, cfg)
	if err != nil {
		return err
	}
	return legacyDDL(ctx, pool, cfg, src, "removing the sync trigger", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", pgx.Identifier{SyncTriggerName}.Sanitize(), src.ident())); err != nil {
			return fmt.Errorf("dropping the sync trigger on %s: %w", src, err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("DROP FUNCTION IF EXISTS %s()", syncFunction(cfg).Sanitize())); err != nil {
			return fmt.Errorf("dropping the sync trigger function: %w", err)
		}
		return nil
	})
}
