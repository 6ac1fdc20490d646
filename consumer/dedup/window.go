package dedup

import (
	"sort"
	"time"

	"github.com/google/uuid"
)

// Window is the dedup window: [oldest lower bound, newest upper bound) of the
// attached partitions, in producer time. Ids stamped outside it have no
// partition. Foreign partitions can leave holes inside; Inserter checks ids
// against the partitions themselves, not just this envelope.
type Window struct {
	From, To time.Time
}

// IsZero reports whether the window is empty (no partition attached).
func (w Window) IsZero() bool { return !w.To.After(w.From) }

// Contains reports whether t lies in [From, To).
func (w Window) Contains(t time.Time) bool { return !t.Before(w.From) && t.Before(w.To) }

// String formats the window as [from, to) in RFC 3339.
func (w Window) String() string {
	if w.IsZero() {
		return "[empty)"
	}
	return "[" + w.From.UTC().Format(time.RFC3339) + ", " + w.To.UTC().Format(time.RFC3339) + ")"
}

// coverage is the set of uuid ranges that accept inserts: the attached
// partitions not pending detach, sorted by lower bound.
type coverage struct {
	ranges     []keyRange
	hasDefault bool // a (foreign) DEFAULT partition accepts every id
}

func newCoverage(parts []ObservedPartition) coverage {
	var c coverage
	for _, p := range parts {
		if p.DetachPending {
			continue // new transactions no longer route rows to it
		}
		if p.Default {
			c.hasDefault = true
			continue
		}
		c.ranges = append(c.ranges, p.keyRange())
	}
	sort.Slice(c.ranges, func(i, j int) bool { return lessUUID(c.ranges[i].lo, c.ranges[j].lo) })
	return c
}

func (c coverage) contains(id uuid.UUID) bool {
	if c.hasDefault {
		return true
	}
	// The first range whose lower bound is above id is past it; the one
	// before is the only candidate (ranges never overlap).
	i := sort.Search(len(c.ranges), func(i int) bool { return lessUUID(id, c.ranges[i].lo) })
	return i > 0 && c.ranges[i-1].contains(id)
}

func (c coverage) window() Window {
	if len(c.ranges) == 0 {
		return Window{}
	}
	w := Window{From: EventTime(c.ranges[0].lo)}
	for _, r := range c.ranges {
		to := EventTime(r.hi)
		if r.hiMax {
			to = EventTime(uuid.Max)
		}
		if to.After(w.To) {
			w.To = to
		}
	}
	return w
}

func lessUUID(a, b uuid.UUID) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// KeyRange is a range of event ids [From, To) that accepts inserts. To is
// uuid.Max for a partition unbounded above (MAXVALUE), which leaves out
// uuid.Max itself, an id no producer stamps.
type KeyRange struct {
	From, To uuid.UUID
}

// Ranges merges the partitions that accept inserts (attached, not pending
// detach, not DEFAULT) into maximal contiguous id ranges, in order. A range
// starting at MINVALUE starts at the nil uuid.
func Ranges(parts []ObservedPartition) []KeyRange {
	var out []KeyRange
	for _, r := range newCoverage(parts).ranges {
		to := r.hi
		if r.hiMax {
			to = uuid.Max
		}
		if n := len(out); n > 0 && out[n-1].To == r.lo {
			out[n-1].To = to
			continue
		}
		out = append(out, KeyRange{From: r.lo, To: to})
	}
	return out
}

// WindowOf is the dedup window the partitions cover (as State.Window): from
// the oldest lower bound to the newest upper bound of those that accept
// inserts.
func WindowOf(parts []ObservedPartition) Window { return newCoverage(parts).window() }
