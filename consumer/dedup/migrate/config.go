package migrate

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// Defaults of Config.
const (
	DefaultIDColumn          = "event_id"
	DefaultGroupColumn       = "consumer_group"
	DefaultProcessedAtColumn = "processed_at"
	DefaultLegacySuffix      = "_legacy"
	DefaultPremake           = dedup.DefaultPremake
	DefaultRetention         = dedup.DefaultRetention
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
	pol := c.policy().WithDefaults()
	c.Premake, c.Retention = pol.Premake, pol.Retention
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

// policy is the partition policy of the new table: its interval, Premake
// and Retention.
func (c Config) policy() dedup.Policy {
	return dedup.Policy{Interval: c.Table.Interval, Premake: c.Premake, Retention: c.Retention}
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
	if err := c.policy().Validate(); err != nil {
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
