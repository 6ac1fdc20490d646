package dedup

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// FuzzPlanPartitions checks the planner's invariants on arbitrary clocks,
// policies and sets of existing partitions (ours, ours with wrong bounds,
// foreign ones, a DEFAULT, unbounded ranges): no overlaps, no gaps when
// nothing foreign is in the way, nothing intersecting the retention window
// dropped, names unique, short and valid, and a plan that converges.
func FuzzPlanPartitions(f *testing.F) {
	f.Add(int64(1709125200), uint8(1), uint8(3), uint16(72), []byte{})
	f.Add(int64(1704067199), uint8(0), uint8(2), uint16(1), []byte{0, 0, 0, 0, 3, 0, 2, 250, 2})
	f.Add(int64(1609416000), uint8(2), uint8(2), uint16(336), []byte{1, 1, 5, 3, 0, 0, 0, 255, 0})
	f.Add(int64(1709251199), uint8(3), uint8(1), uint16(744), []byte{2, 254, 1, 0, 1, 0})
	f.Add(int64(0), uint8(2), uint8(0), uint16(0), []byte{3, 1, 1})
	f.Fuzz(func(t *testing.T, nowSec int64, ivSel, premake uint8, retentionH uint16, spec []byte) {
		const table = "processed_event"
		iv := []Interval{Hourly, Daily, Weekly, Monthly}[int(ivSel)%4]
		// Keep the clock where UUID v7 timestamps and four-digit years live.
		span := maxPlanTime.Unix() - minPlanTime.Unix()
		now := time.Unix(minPlanTime.Unix()+((nowSec%span)+span)%span, 0).UTC()
		retention := time.Duration(retentionH) * time.Hour
		existing := fuzzExisting(iv, table, now, spec)

		plan := PlanPartitions(now, iv, int(premake), retention, table, existing)
		if again := PlanPartitions(now, iv, int(premake), retention, table, existing); !plansEqual(plan, again) {
			t.Fatalf("planner is not deterministic")
		}
		keepFrom := now.Add(-retention)

		// Classification: every existing partition is kept, dropped or foreign.
		isOurs := map[string]bool{}
		for _, p := range append(slices.Clone(plan.Keep), plan.Drop...) {
			isOurs[p.Name] = true
		}
		if len(isOurs)+len(plan.Foreign) != len(existing) {
			t.Fatalf("%d existing, %d ours + %d foreign", len(existing), len(isOurs), len(plan.Foreign))
		}
		for _, p := range plan.Drop {
			if p.To.After(keepFrom) {
				t.Fatalf("dropped %s [%s, %s) intersects the window from %s", p.Name, p.From, p.To, keepFrom)
			}
		}
		for _, p := range plan.Keep {
			if !p.To.After(keepFrom) {
				t.Fatalf("kept %s [%s, %s) which is wholly older than %s", p.Name, p.From, p.To, keepFrom)
			}
		}

		// Created partitions: well formed, unique, overlapping nothing.
		taken := map[string]bool{}
		for _, e := range existing {
			taken[e.Name] = true
		}
		var ranges []keyRange
		for _, e := range existing {
			if !e.Default {
				ranges = append(ranges, e.keyRange())
			}
		}
		for _, p := range plan.Create {
			if taken[p.Name] {
				t.Fatalf("created name %s is not unique", p.Name)
			}
			taken[p.Name] = true
			if len(p.Name) > MaxIdentifierLen || ValidateIdentifier(p.Name) != nil || p.Name != PartitionName(table, iv, p.From) {
				t.Fatalf("bad partition name %q", p.Name)
			}
			if !iv.Floor(p.From).Equal(p.From) || !iv.Next(p.From).Equal(p.To) {
				t.Fatalf("%s = [%s, %s) is not one %s slot", p.Name, p.From, p.To, iv)
			}
			if !p.To.After(keepFrom) {
				t.Fatalf("created %s wholly older than the window", p.Name)
			}
			if overlapsAny(p.keyRange(), ranges) {
				t.Fatalf("created %s [%s, %s) overlaps an existing or created partition", p.Name, p.From, p.To)
			}
			ranges = append(ranges, p.keyRange())
		}

		// Without foreign partitions in the way the result is one contiguous
		// run from the slot holding now-retention to premake slots past now.
		hasForeignRange := false
		for _, e := range existing {
			if !isOurs[e.Name] && !e.Default {
				hasForeignRange = true
			}
		}
		result := append(slices.Clone(plan.Keep), plan.Create...)
		slices.SortFunc(result, func(a, b Partition) int { return a.From.Compare(b.From) })
		wantFrom := iv.Floor(keepFrom)
		wantTo := iv.Floor(now)
		for i := 0; i <= int(premake); i++ {
			wantTo = iv.Next(wantTo)
		}
		slots := 0
		for s := wantFrom; s.Before(wantTo) && slots <= MaxPartitions; s = iv.Next(s) {
			slots++
		}
		if !hasForeignRange && slots <= MaxPartitions && !wantFrom.Before(minPlanTime) && !wantTo.After(maxPlanTime) {
			if len(result) == 0 {
				t.Fatalf("nothing planned for [%s, %s)", wantFrom, wantTo)
			}
			if result[0].From.After(wantFrom) || result[len(result)-1].To.Before(wantTo) {
				t.Fatalf("result covers [%s, %s), want at least [%s, %s)", result[0].From, result[len(result)-1].To, wantFrom, wantTo)
			}
			for i := 1; i < len(result); i++ {
				if !result[i-1].To.Equal(result[i].From) {
					t.Fatalf("gap or overlap between %s and %s", result[i-1].Name, result[i].Name)
				}
			}
		}

		// Converges: with the plan applied, nothing is left to create or drop.
		var after []ObservedPartition
		for _, e := range existing {
			if !slices.ContainsFunc(plan.Drop, func(p Partition) bool { return p.Name == e.Name }) {
				after = append(after, e)
			}
		}
		for _, p := range plan.Create {
			after = append(after, observed(p))
		}
		next := PlanPartitions(now, iv, int(premake), retention, table, after)
		if len(next.Create) != 0 || len(next.Drop) != 0 {
			t.Fatalf("plan does not converge: then create %v drop %v", names(next.Create), names(next.Drop))
		}
	})
}

// fuzzExisting turns bytes into a realistic set of attached partitions: each
// 3 bytes (kind, slot offset from now, extra) add one, skipped if it would
// overlap one already there (PostgreSQL refuses overlapping partitions).
func fuzzExisting(iv Interval, table string, now time.Time, spec []byte) []ObservedPartition {
	var out []ObservedPartition
	hasDefault := false
	base := iv.Floor(now)
	for i := 0; i+2 < len(spec) && len(out) < 64; i += 3 {
		kind, off, extra := spec[i]%4, int(int8(spec[i+1])), int(spec[i+2])
		s := base
		for ; off > 0; off-- {
			s = iv.Next(s)
		}
		for ; off < 0; off++ {
			s = iv.Prev(s)
		}
		if s.Before(minPlanTime) || !s.Before(maxPlanTime) {
			continue
		}
		var p ObservedPartition
		switch kind {
		case 0: // ours
			p = observed(iv.partition(table, s))
		case 1: // our name, bounds shifted by some milliseconds
			p = observed(iv.partition(table, s))
			p.From = BoundaryUUID(s.Add(time.Duration(extra+1) * time.Millisecond))
		case 2: // foreign name, spanning 1..4 slots
			to := s
			for k := 0; k <= extra%4; k++ {
				to = iv.Next(to)
			}
			p = ObservedPartition{Name: fmt.Sprintf("foreign_%d", i), From: BoundaryUUID(s), To: BoundaryUUID(to)}
		case 3: // DEFAULT, or an unbounded range
			switch {
			case extra%3 == 0 && !hasDefault:
				hasDefault = true
				p = ObservedPartition{Name: table + "_default", Default: true}
			case extra%3 == 1:
				p = ObservedPartition{Name: fmt.Sprintf("low_%d", i), FromMin: true, To: BoundaryUUID(s)}
			default:
				p = ObservedPartition{Name: fmt.Sprintf("high_%d", i), From: BoundaryUUID(s), ToMax: true}
			}
		}
		clash := false
		for _, o := range out {
			if o.Name == p.Name || (!p.Default && !o.Default && p.keyRange().overlaps(o.keyRange())) {
				clash = true
			}
		}
		if !clash && (p.Default || p.keyRange().overlaps(p.keyRange())) { // skip empty ranges
			out = append(out, p)
		}
	}
	return out
}

func plansEqual(a, b Plan) bool {
	eq := func(x, y []Partition) bool {
		return slices.EqualFunc(x, y, func(p, q Partition) bool { return p.Name == q.Name && p.From.Equal(q.From) && p.To.Equal(q.To) })
	}
	return eq(a.Create, b.Create) && eq(a.Drop, b.Drop) && eq(a.Keep, b.Keep) && slices.Equal(a.Foreign, b.Foreign)
}

// FuzzValidateIdentifier checks that every accepted identifier is safe: short,
// plain lower-case ASCII, not reserved, and quoted by pgx without escaping
// (so the quoted and unquoted spellings name the same object).
func FuzzValidateIdentifier(f *testing.F) {
	for _, s := range []string{"processed_event", "", "a", "select", "Users", `a"b`, "a;drop table x", "é", "1abc",
		"pg_x", strings.Repeat("a", 63), strings.Repeat("a", 64), "a b", "a\x00b", "_ok_1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateIdentifier(s)
		if err != nil {
			return
		}
		if s == "" || len(s) > MaxIdentifierLen || !utf8.ValidString(s) {
			t.Fatalf("accepted %q", s)
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !(c >= 'a' && c <= 'z' || c == '_' || (i > 0 && c >= '0' && c <= '9')) {
				t.Fatalf("accepted %q with byte %q at %d", s, c, i)
			}
		}
		if reservedKeywords[s] || strings.HasPrefix(s, "pg_") {
			t.Fatalf("accepted reserved %q", s)
		}
		if q := (pgx.Identifier{s}).Sanitize(); q != `"`+s+`"` {
			t.Fatalf("pgx quotes %q as %s, needing escapes", s, q)
		}
	})
}
