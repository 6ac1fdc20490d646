package dedup

import (
	"fmt"
	"strings"
	"time"
)

// Defaults of Policy, the same as the IdempotentConsumer's spec.dedup
// defaults and those of the migration tool.
const (
	DefaultPremake   = 4
	DefaultRetention = 7 * 24 * time.Hour
)

// Policy is how a table's partitions are kept: Interval wide, Premake slots
// made ahead of the current one, and every slot back to now minus Retention
// kept. Maintain and the migration apply it; PlanPartitions decides by it.
type Policy struct {
	// Interval is the span of one partition; default Daily. It is part of
	// the table's layout (Table.Interval) and cannot change.
	Interval Interval
	// Premake is the number of partitions made after the current one;
	// default 4.
	Premake int
	// Retention is how long a partition is kept after its range ends;
	// default 168h.
	Retention time.Duration
}

// WithDefaults returns p with zero fields set to their defaults, as the
// IdempotentConsumer's spec and the migration tool do. (A negative value is
// left for Validate to reject.)
func (p Policy) WithDefaults() Policy {
	if p.Interval == "" {
		p.Interval = DefaultInterval
	}
	if p.Premake == 0 {
		p.Premake = DefaultPremake
	}
	if p.Retention == 0 {
		p.Retention = DefaultRetention
	}
	return p
}

// Validate checks p as given (apply WithDefaults first for defaults): a
// known interval, premake not negative, retention positive, and the span
// they imply within MaxPartitions.
func (p Policy) Validate() error {
	if !p.Interval.Valid() {
		return fmt.Errorf("invalid partition policy: interval %q is not Hourly, Daily, Weekly or Monthly", p.Interval)
	}
	if p.Premake < 0 {
		return fmt.Errorf("invalid partition policy: premake %d is negative", p.Premake)
	}
	if p.Retention <= 0 {
		return fmt.Errorf("invalid partition policy: retention %s must be positive", p.Retention)
	}
	// Retention is a duration and the interval a calendar span; count with
	// the shortest span (a 28-day month) to bound the number from above.
	slots := int64(p.Retention/p.Interval.minSpan()) + 2 + int64(p.Premake)
	if slots > MaxPartitions {
		return fmt.Errorf("invalid partition policy: retention %s and premake %d need about %d %s partitions, more than %d; use a longer interval",
			p.Retention, p.Premake, slots, strings.ToLower(string(p.Interval)), MaxPartitions)
	}
	return nil
}

// Plan is PlanPartitions for this policy: the partitions of table to create
// and drop at now, given the existing ones.
func (p Policy) Plan(now time.Time, table string, existing []ObservedPartition) Plan {
	return PlanPartitions(now, p.Interval, p.Premake, p.Retention, table, existing)
}
