package dedup

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestRangesAndWindowOf: the partitions that accept inserts merge into
// contiguous id ranges in order (adjacent ones joined, a gap kept, pending
// detach and DEFAULT left out, MINVALUE and MAXVALUE as the nil and max
// uuid), and WindowOf spans them.
func TestRangesAndWindowOf(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2024, 3, d, 0, 0, 0, 0, time.UTC) }
	b := func(d int) uuid.UUID { return BoundaryUUID(day(d)) }
	part := func(name string, from, to int) ObservedPartition {
		return ObservedPartition{Name: name, From: b(from), To: b(to)}
	}
	pending := part("pending", 20, 21)
	pending.DetachPending = true
	parts := []ObservedPartition{
		part("p3", 3, 4), part("p1", 1, 2), part("p2", 2, 3), // out of order, adjacent
		part("p6", 6, 7), // after a gap
		pending,
		{Name: "def", Default: true},
	}
	want := []KeyRange{{From: b(1), To: b(4)}, {From: b(6), To: b(7)}}
	if got := Ranges(parts); !slices.Equal(got, want) {
		t.Fatalf("Ranges = %v, want %v", got, want)
	}
	if got, want := WindowOf(parts), (Window{From: day(1), To: day(7)}); got != want {
		t.Fatalf("WindowOf = %v, want %v", got, want)
	}

	open := []ObservedPartition{{Name: "lo", FromMin: true, To: b(2)}, part("mid", 2, 3), {Name: "hi", From: b(3), ToMax: true}}
	if got, want := Ranges(open), []KeyRange{{From: uuid.Nil, To: uuid.Max}}; !slices.Equal(got, want) {
		t.Fatalf("Ranges of MINVALUE..MAXVALUE = %v, want %v", got, want)
	}
	if Ranges(nil) != nil || !WindowOf(nil).IsZero() {
		t.Fatal("no partitions: want no ranges and an empty window")
	}
}
