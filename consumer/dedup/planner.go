package dedup

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
)

// MaxPartitions caps how many partitions one table may span (retention plus
// premake). Every partition is a relation with its own index; thousands of
// them slow planning and catalog scans, and an hourly table with years of
// retention is a configuration mistake worth reporting rather than executing.
const MaxPartitions = 2048

// The planner works inside [minPlanTime, maxPlanTime): from the Unix epoch
// (UUID v7 timestamps are unsigned) to the last month whose names still have
// a four-digit year, so every name has the same, bounded length.
var (
	minPlanTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxPlanTime = time.Date(9999, 12, 1, 0, 0, 0, 0, time.UTC)
)

// Partition is one partition as the planner sees it: a name and a time range
// [From, To) in UTC. Its bounds are BoundaryUUID(From) and BoundaryUUID(To).
type Partition struct {
	Name     string
	From, To time.Time
}

// Bounds returns the partition's uuid bounds [lo, hi).
func (p Partition) Bounds() (lo, hi uuid.UUID) { return BoundaryUUID(p.From), BoundaryUUID(p.To) }

// ObservedPartition is a partition attached to the table, as read from
// pg_catalog. It may be one of ours or a foreign one with arbitrary bounds.
type ObservedPartition struct {
	// Name is the relation name, schema-qualified ("schema.name") when the
	// partition lives outside the parent's schema (never one of ours).
	Name string
	// Bound is the partition bound as pg_get_expr prints it.
	Bound string
	// Default is set for a DEFAULT partition (never one of ours).
	Default bool
	// From and To are the range bounds; FromMin and ToMax stand for MINVALUE
	// and MAXVALUE, in which case From or To is meaningless.
	From, To       uuid.UUID
	FromMin, ToMax bool
	// DetachPending is set while a DETACH ... CONCURRENTLY is unfinished.
	DetachPending bool
	// Rows is the planner's row estimate (pg_class.reltuples); -1 when the
	// partition was never vacuumed or analyzed.
	Rows int64
}

// TimeRange returns the partition's bounds as times when both are UUID v7
// millisecond boundaries (the low 80 bits zero), as ours always are.
func (p ObservedPartition) TimeRange() (from, to time.Time, ok bool) {
	if p.Default || p.FromMin || p.ToMax || !isBoundary(p.From) || !isBoundary(p.To) {
		return time.Time{}, time.Time{}, false
	}
	return EventTime(p.From), EventTime(p.To), true
}

// Plan is what PlanPartitions decided.
type Plan struct {
	// Create lists the partitions to create, oldest first.
	Create []Partition
	// Drop lists our partitions whose whole range is older than now minus
	// the retention, oldest first.
	Drop []Partition
	// Keep lists our existing partitions that stay, oldest first.
	Keep []Partition
	// Foreign names the attached partitions that do not match our naming and
	// bounds; they are reported, never created over, detached or dropped.
	Foreign []string
}

// PlanPartitions decides which partitions of table to create and drop. It is
// pure and deterministic; all times are taken in UTC.
//
// The table should cover, without gaps, every slot of the interval from the
// one containing now-retention to premake slots after the one containing now
// (and up to the newest partition that already exists, so gaps left between
// existing partitions are filled too). A partition is dropped only when its
// whole range lies before now-retention. Existing partitions whose name or
// bounds are not exactly ours are Foreign: the planner never creates a
// partition overlapping one of them, so their range may leave a hole that is
// reported, not papered over. A negative premake or retention counts as zero;
// the span is capped at MaxPartitions slots (the newest are kept).
func PlanPartitions(now time.Time, iv Interval, premake int, retention time.Duration,
	table string, existing []ObservedPartition) Plan {
	var plan Plan
	valid := iv.Valid() && validTableName(table) == nil
	ours := make(map[time.Time]Partition)
	var occupied []keyRange
	for _, e := range existing {
		if valid {
			if p, ok := ownPartition(e, iv, table); ok {
				if _, dup := ours[p.From]; !dup {
					ours[p.From] = p
					occupied = append(occupied, p.keyRange())
					continue
				}
			}
		}
		plan.Foreign = append(plan.Foreign, e.Name)
		if !e.Default {
			occupied = append(occupied, e.keyRange())
		}
	}
	sort.Strings(plan.Foreign)
	if !valid {
		return plan
	}

	now = clampTime(now.UTC())
	if premake < 0 {
		premake = 0
	}
	if premake > MaxPartitions {
		premake = MaxPartitions
	}
	if retention < 0 {
		retention = 0
	}
	keepFrom := now.Add(-retention)

	end := iv.Floor(now)
	for i := 0; i <= premake && end.Before(maxPlanTime); i++ {
		end = iv.Next(end)
	}
	for _, p := range sortedPartitions(ours) {
		if !p.To.After(keepFrom) {
			plan.Drop = append(plan.Drop, p)
			continue
		}
		plan.Keep = append(plan.Keep, p)
		if p.To.After(end) {
			end = p.To
		}
	}

	start := iv.Floor(clampTime(keepFrom))
	// Walk back from the end so a span over the cap keeps the newest slots.
	first, n := end, 0
	for first.After(start) && n < MaxPartitions {
		first = iv.Prev(first)
		n++
	}
	for s := first; s.Before(end); s = iv.Next(s) {
		if _, ok := ours[s]; ok || s.Before(minPlanTime) || !s.Before(maxPlanTime) {
			continue // a week starting before 1970 cannot be named or bounded
		}
		p := iv.partition(table, s)
		if overlapsAny(p.keyRange(), occupied) {
			continue
		}
		plan.Create = append(plan.Create, p)
	}
	return plan
}

// ValidatePolicy checks a premake count and retention against the interval:
// Policy{Interval: iv, Premake: premake, Retention: retention}.Validate().
func ValidatePolicy(iv Interval, premake int, retention time.Duration) error {
	return Policy{Interval: iv, Premake: premake, Retention: retention}.Validate()
}

// PartitionName returns the name of table's partition starting at from:
// table + "_p" + a UTC stamp, yyyymmddhh (Hourly), yyyymmdd (Daily, and
// Weekly with the Monday's date) or yyyymm (Monthly). With a table name of at
// most MaxTableNameLen bytes the result fits MaxIdentifierLen, so it is never
// truncated; within one table (whose interval is fixed) names are unique.
func PartitionName(table string, iv Interval, from time.Time) string {
	return table + "_p" + from.UTC().Format(iv.stampLayout())
}

// ParsePartitionName is the inverse of PartitionName: it returns the start of
// the slot that name denotes, and false if name is not a well-formed partition
// name of table for iv (wrong prefix, bad stamp, or not at a slot start).
func ParsePartitionName(table string, iv Interval, name string) (time.Time, bool) {
	stamp, ok := strings.CutPrefix(name, table+"_p")
	if !ok || !iv.Valid() {
		return time.Time{}, false
	}
	layout := iv.stampLayout()
	if len(stamp) != len(layout) {
		return time.Time{}, false
	}
	for _, c := range stamp {
		if c < '0' || c > '9' {
			return time.Time{}, false
		}
	}
	t, err := time.ParseInLocation(layout, stamp, time.UTC)
	if err != nil || !iv.Floor(t).Equal(t) || t.Before(minPlanTime) || !t.Before(maxPlanTime) {
		return time.Time{}, false
	}
	return t, true
}

// Floor returns the start of the slot containing t, in UTC.
func (iv Interval) Floor(t time.Time) time.Time {
	t = t.UTC()
	switch iv {
	case Hourly:
		return t.Truncate(time.Hour)
	case Daily:
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	case Weekly:
		d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7)) // back to Monday
	case Monthly:
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return t
}

// Next returns the start of the slot after the one starting at start.
func (iv Interval) Next(start time.Time) time.Time {
	switch iv {
	case Hourly:
		return start.Add(time.Hour)
	case Daily:
		return start.AddDate(0, 0, 1)
	case Weekly:
		return start.AddDate(0, 0, 7)
	case Monthly:
		return start.AddDate(0, 1, 0) // start is the 1st, so no day overflow
	}
	return start
}

// Prev returns the start of the slot before the one starting at start.
func (iv Interval) Prev(start time.Time) time.Time {
	switch iv {
	case Hourly:
		return start.Add(-time.Hour)
	case Daily:
		return start.AddDate(0, 0, -1)
	case Weekly:
		return start.AddDate(0, 0, -7)
	case Monthly:
		return start.AddDate(0, -1, 0)
	}
	return start
}

func (iv Interval) stampLayout() string {
	switch iv {
	case Hourly:
		return "2006010215"
	case Monthly:
		return "200601"
	}
	return "20060102"
}

func (iv Interval) minSpan() time.Duration {
	switch iv {
	case Hourly:
		return time.Hour
	case Daily:
		return 24 * time.Hour
	case Weekly:
		return 7 * 24 * time.Hour
	}
	return 28 * 24 * time.Hour
}

func (iv Interval) partition(table string, from time.Time) Partition {
	return Partition{Name: PartitionName(table, iv, from), From: from, To: iv.Next(from)}
}

// ownPartition recognises one of our partitions: a name from PartitionName
// and bounds exactly the slot that name denotes. Anything else is foreign.
func ownPartition(e ObservedPartition, iv Interval, table string) (Partition, bool) {
	from, to, ok := e.TimeRange()
	if !ok {
		return Partition{}, false
	}
	start, ok := ParsePartitionName(table, iv, e.Name)
	if !ok || !start.Equal(from) || !iv.Next(from).Equal(to) {
		return Partition{}, false
	}
	return Partition{Name: e.Name, From: from, To: to}, true
}

func validTableName(table string) error {
	if err := ValidateIdentifier(table); err != nil {
		return err
	}
	if len(table) > MaxTableNameLen {
		return fmt.Errorf("table name %q longer than %d bytes", table, MaxTableNameLen)
	}
	return nil
}

func clampTime(t time.Time) time.Time {
	if t.Before(minPlanTime) {
		return minPlanTime
	}
	if !t.Before(maxPlanTime) {
		return maxPlanTime.Add(-time.Millisecond)
	}
	return t
}

func sortedPartitions(m map[time.Time]Partition) []Partition {
	out := make([]Partition, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].From.Before(out[j].From) })
	return out
}

// keyRange is a range of uuids [lo, hi); hiMax means unbounded above.
// MINVALUE needs no flag: nothing sorts below the nil uuid.
type keyRange struct {
	lo, hi uuid.UUID
	hiMax  bool
}

func (p Partition) keyRange() keyRange {
	lo, hi := p.Bounds()
	return keyRange{lo: lo, hi: hi}
}

func (p ObservedPartition) keyRange() keyRange {
	r := keyRange{lo: p.From, hi: p.To, hiMax: p.ToMax}
	if p.FromMin {
		r.lo = uuid.Nil
	}
	return r
}

// contains reports whether id lies in r.
func (r keyRange) contains(id uuid.UUID) bool {
	return bytes.Compare(id[:], r.lo[:]) >= 0 && (r.hiMax || bytes.Compare(id[:], r.hi[:]) < 0)
}

func (r keyRange) overlaps(o keyRange) bool {
	// [a,b) and [c,d) overlap iff a < d and c < b (and neither is empty).
	aLessD := o.hiMax || bytes.Compare(r.lo[:], o.hi[:]) < 0
	cLessB := r.hiMax || bytes.Compare(o.lo[:], r.hi[:]) < 0
	return aLessD && cLessB
}

func overlapsAny(r keyRange, rs []keyRange) bool {
	for _, o := range rs {
		if r.overlaps(o) {
			return true
		}
	}
	return false
}
