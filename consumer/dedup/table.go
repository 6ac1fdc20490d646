package dedup

import (
	"errors"
	"fmt"
	"regexp"
)

// Interval is the time span covered by one partition. Boundaries are in UTC.
type Interval string

// The supported partition intervals.
const (
	Hourly  Interval = "Hourly"
	Daily   Interval = "Daily"
	Weekly  Interval = "Weekly" // weeks start on Monday (ISO 8601)
	Monthly Interval = "Monthly"
)

// Valid reports whether iv is one of the supported intervals.
func (iv Interval) Valid() bool {
	switch iv {
	case Hourly, Daily, Weekly, Monthly:
		return true
	}
	return false
}

// Scope decides what a processed row deduplicates.
type Scope string

const (
	// ScopeConsumerGroup keys the table by (event_id, consumer_group): each
	// consumer group processes an event once.
	ScopeConsumerGroup Scope = "ConsumerGroup"
	// ScopeGlobal keys the table by event_id alone: an event takes effect
	// once across all groups writing to the table.
	ScopeGlobal Scope = "Global"
)

// Valid reports whether s is one of the supported scopes.
func (s Scope) Valid() bool { return s == ScopeConsumerGroup || s == ScopeGlobal }

// Defaults applied by Table.WithDefaults.
const (
	DefaultSchema    = "public"
	DefaultTableName = "processed_event"
	DefaultScope     = ScopeConsumerGroup
	DefaultInterval  = Daily
)

// MaxIdentifierLen is PostgreSQL's identifier limit (NAMEDATALEN-1) in bytes.
// Longer names are silently truncated by the server, which could make two
// names collide, so they are rejected instead.
const MaxIdentifierLen = 63

// partitionSuffixLen is the longest suffix PartitionName appends: "_p" and an
// hourly stamp yyyymmddhh.
const partitionSuffixLen = len("_p") + len("2006010215")

// MaxTableNameLen is the longest table name accepted: it leaves room for the
// partition suffix, so partition names are never truncated and never collide.
const MaxTableNameLen = MaxIdentifierLen - partitionSuffixLen

// Table identifies one processed_event table and its layout.
type Table struct {
	// Schema holds the table; default "public". Created if missing.
	Schema string
	// Name of the partitioned table; default "processed_event", at most
	// MaxTableNameLen bytes.
	Name string
	// Scope decides the primary key; default ConsumerGroup.
	Scope Scope
	// Interval is the span of one partition; default Daily. It is part of
	// the layout and cannot change once the table exists.
	Interval Interval
}

// WithDefaults returns t with empty fields set to their defaults.
func (t Table) WithDefaults() Table {
	if t.Schema == "" {
		t.Schema = DefaultSchema
	}
	if t.Name == "" {
		t.Name = DefaultTableName
	}
	if t.Scope == "" {
		t.Scope = DefaultScope
	}
	if t.Interval == "" {
		t.Interval = DefaultInterval
	}
	return t
}

// Validate checks t (after defaults) without contacting the database: the
// identifiers, the table name length, the scope and the interval.
func (t Table) Validate() error {
	t = t.WithDefaults()
	var errs []error
	if err := ValidateIdentifier(t.Schema); err != nil {
		errs = append(errs, fmt.Errorf("schema: %w", err))
	}
	if err := ValidateIdentifier(t.Name); err != nil {
		errs = append(errs, fmt.Errorf("table name: %w", err))
	} else if len(t.Name) > MaxTableNameLen {
		errs = append(errs, fmt.Errorf("table name: %q is %d bytes, at most %d leave room for the partition suffix", t.Name, len(t.Name), MaxTableNameLen))
	}
	if !t.Scope.Valid() {
		errs = append(errs, fmt.Errorf("scope: %q is not %q or %q", t.Scope, ScopeConsumerGroup, ScopeGlobal))
	}
	if !t.Interval.Valid() {
		errs = append(errs, fmt.Errorf("interval: %q is not Hourly, Daily, Weekly or Monthly", t.Interval))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid dedup table: %w", errors.Join(errs...))
	}
	return nil
}

// String returns the schema-qualified name, unquoted, for messages.
func (t Table) String() string {
	t = t.WithDefaults()
	return t.Schema + "." + t.Name
}

// identifierRE accepts the identifiers that mean the same quoted and
// unquoted: lower-case ASCII letters, digits and underscores, not starting
// with a digit. Anything else (quotes, semicolons, spaces, upper case,
// unicode) would either need quoting to survive or fold differently in psql.
var identifierRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// ErrInvalidIdentifier is wrapped by every error of ValidateIdentifier.
var ErrInvalidIdentifier = errors.New("invalid identifier")

// ValidateIdentifier checks that s is a safe PostgreSQL identifier for a
// schema or table: 1 to MaxIdentifierLen bytes of [a-z0-9_], not starting
// with a digit, not a reserved key word and not in the "pg_" namespace that
// PostgreSQL reserves for system objects. Identifiers are quoted with
// pgx.Identifier as well; this check keeps hostile or confusing names out of
// the catalog in the first place.
func ValidateIdentifier(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrInvalidIdentifier)
	case len(s) > MaxIdentifierLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidIdentifier, len(s), MaxIdentifierLen)
	case !identifierRE.MatchString(s):
		return fmt.Errorf("%w: %q must be lower-case ASCII letters, digits and underscores, not starting with a digit", ErrInvalidIdentifier, s)
	case reservedKeywords[s]:
		return fmt.Errorf("%w: %q is a reserved SQL key word", ErrInvalidIdentifier, s)
	case len(s) >= 3 && s[:3] == "pg_":
		return fmt.Errorf("%w: %q: the pg_ prefix is reserved for system objects", ErrInvalidIdentifier, s)
	}
	return nil
}

// reservedKeywords are PostgreSQL 15's reserved key words (categories
// "reserved" and "reserved (can be function or type name)" of
// pg_get_keywords()); a test compares this list with the server's.
var reservedKeywords = map[string]bool{
	"all": true, "analyse": true, "analyze": true, "and": true, "any": true, "array": true,
	"as": true, "asc": true, "asymmetric": true, "authorization": true, "binary": true,
	"both": true, "case": true, "cast": true, "check": true, "collate": true, "collation": true,
	"column": true, "concurrently": true, "constraint": true, "create": true, "cross": true,
	"current_catalog": true, "current_date": true, "current_role": true, "current_schema": true,
	"current_time": true, "current_timestamp": true, "current_user": true, "default": true,
	"deferrable": true, "desc": true, "distinct": true, "do": true, "else": true, "end": true,
	"except": true, "false": true, "fetch": true, "for": true, "foreign": true, "freeze": true,
	"from": true, "full": true, "grant": true, "group": true, "having": true, "ilike": true,
	"in": true, "initially": true, "inner": true, "intersect": true, "into": true, "is": true,
	"isnull": true, "join": true, "lateral": true, "leading": true, "left": true, "like": true,
	"limit": true, "localtime": true, "localtimestamp": true, "natural": true, "not": true,
	"notnull": true, "null": true, "offset": true, "on": true, "only": true, "or": true,
	"order": true, "outer": true, "overlaps": true, "placing": true, "primary": true,
	"references": true, "returning": true, "right": true, "select": true, "session_user": true,
	"similar": true, "some": true, "symmetric": true, "system_user": true, "table": true,
	"tablesample": true, "then": true, "to": true, "trailing": true, "true": true, "union": true,
	"unique": true, "user": true, "using": true, "variadic": true, "verbose": true, "when": true,
	"where": true, "window": true, "with": true,
}
