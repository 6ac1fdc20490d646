package dedup

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

func observed(p Partition) ObservedPartition {
	lo, hi := p.Bounds()
	return ObservedPartition{Name: p.Name, From: lo, To: hi, Rows: -1}
}

func names(ps []Partition) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

func TestBoundaryUUID(t *testing.T) {
	tm := time.Date(2024, 2, 29, 12, 34, 56, 789_999_999, time.UTC)
	u := BoundaryUUID(tm)
	// 2024-02-29T12:34:56.789Z is 1709210096789 ms = 0x018df4dc5495.
	if got, want := u.String(), "018df4dc-5495-0000-0000-000000000000"; got != want {
		t.Fatalf("BoundaryUUID(%s) = %s, want %s", tm, got, want)
	}
	if got := EventTime(u); !got.Equal(tm.Truncate(time.Millisecond)) {
		t.Fatalf("EventTime(BoundaryUUID(t)) = %s, want %s", got, tm.Truncate(time.Millisecond))
	}
	// A real UUID v7 generated in a millisecond sorts inside that
	// millisecond's boundaries.
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	at := EventTime(id)
	if lessUUID(id, BoundaryUUID(at)) || !lessUUID(id, BoundaryUUID(at.Add(time.Millisecond))) {
		t.Fatalf("uuid v7 %s not within [%s, %s)", id, BoundaryUUID(at), BoundaryUUID(at.Add(time.Millisecond)))
	}
	if got := BoundaryUUID(time.Unix(-5, 0)); got != uuid.Nil {
		t.Fatalf("BoundaryUUID(before epoch) = %s, want nil uuid", got)
	}
	if got := BoundaryUUID(time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC)); got.String() != "ffffffff-ffff-0000-0000-000000000000" {
		t.Fatalf("BoundaryUUID(year 20000) = %s, want the largest prefix", got)
	}
}

func TestIntervalFloorNextPrev(t *testing.T) {
	cases := []struct {
		iv         Interval
		at         time.Time
		floor, nxt time.Time
	}{
		{Hourly, time.Date(2023, 12, 31, 23, 59, 59, 999e6, time.UTC), utc(2023, 12, 31, 23, 0), utc(2024, 1, 1, 0, 0)},
		{Hourly, utc(2024, 2, 29, 0, 0), utc(2024, 2, 29, 0, 0), utc(2024, 2, 29, 1, 0)},
		{Daily, utc(2024, 2, 28, 13, 0), utc(2024, 2, 28, 0, 0), utc(2024, 2, 29, 0, 0)}, // leap year
		{Daily, utc(2023, 2, 28, 13, 0), utc(2023, 2, 28, 0, 0), utc(2023, 3, 1, 0, 0)},
		{Daily, utc(2100, 2, 28, 1, 0), utc(2100, 2, 28, 0, 0), utc(2100, 3, 1, 0, 0)},  // not a leap year
		{Daily, utc(2000, 2, 28, 1, 0), utc(2000, 2, 28, 0, 0), utc(2000, 2, 29, 0, 0)}, // leap year
		{Daily, utc(2023, 12, 31, 23, 59), utc(2023, 12, 31, 0, 0), utc(2024, 1, 1, 0, 0)},
		{Weekly, utc(2024, 1, 1, 0, 0), utc(2024, 1, 1, 0, 0), utc(2024, 1, 8, 0, 0)},      // a Monday
		{Weekly, utc(2023, 12, 31, 23, 0), utc(2023, 12, 25, 0, 0), utc(2024, 1, 1, 0, 0)}, // a Sunday
		{Weekly, utc(2021, 1, 1, 12, 0), utc(2020, 12, 28, 0, 0), utc(2021, 1, 4, 0, 0)},   // across year end
		{Weekly, utc(2024, 3, 2, 0, 0), utc(2024, 2, 26, 0, 0), utc(2024, 3, 4, 0, 0)},     // across Feb 29
		{Monthly, utc(2024, 2, 29, 23, 59), utc(2024, 2, 1, 0, 0), utc(2024, 3, 1, 0, 0)},
		{Monthly, utc(2023, 12, 31, 23, 59), utc(2023, 12, 1, 0, 0), utc(2024, 1, 1, 0, 0)},
		{Monthly, utc(2024, 1, 31, 0, 0), utc(2024, 1, 1, 0, 0), utc(2024, 2, 1, 0, 0)},
		// Non-UTC input is converted first: 01:00+02:00 on Mar 1 is Feb 29 in UTC.
		{Daily, time.Date(2024, 3, 1, 1, 0, 0, 0, time.FixedZone("EET", 2*3600)), utc(2024, 2, 29, 0, 0), utc(2024, 3, 1, 0, 0)},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.iv, c.at.Format(time.RFC3339)), func(t *testing.T) {
			f := c.iv.Floor(c.at)
			if !f.Equal(c.floor) || f.Location() != time.UTC {
				t.Fatalf("Floor = %s, want %s UTC", f, c.floor)
			}
			if n := c.iv.Next(f); !n.Equal(c.nxt) {
				t.Fatalf("Next = %s, want %s", n, c.nxt)
			}
			if p := c.iv.Prev(c.nxt); !p.Equal(c.floor) {
				t.Fatalf("Prev(Next) = %s, want %s", p, c.floor)
			}
			if !c.iv.Floor(c.nxt.Add(-time.Millisecond)).Equal(c.floor) {
				t.Fatalf("the last millisecond of the slot floors elsewhere")
			}
		})
	}
}

func TestPartitionName(t *testing.T) {
	longTable := strings.Repeat("t", MaxTableNameLen)
	cases := []struct {
		table string
		iv    Interval
		from  time.Time
		want  string
	}{
		{"processed_event", Hourly, utc(2023, 12, 31, 23, 0), "processed_event_p2023123123"},
		{"processed_event", Daily, utc(2024, 2, 29, 0, 0), "processed_event_p20240229"},
		{"processed_event", Weekly, utc(2020, 12, 28, 0, 0), "processed_event_p20201228"},
		{"processed_event", Monthly, utc(2024, 2, 1, 0, 0), "processed_event_p202402"},
		{longTable, Hourly, utc(2024, 1, 1, 5, 0), longTable + "_p2024010105"},
	}
	for _, c := range cases {
		got := PartitionName(c.table, c.iv, c.from)
		if got != c.want {
			t.Errorf("PartitionName(%q, %s, %s) = %q, want %q", c.table, c.iv, c.from, got, c.want)
		}
		if len(got) > MaxIdentifierLen {
			t.Errorf("%q is %d bytes, over %d", got, len(got), MaxIdentifierLen)
		}
		if err := ValidateIdentifier(got); err != nil {
			t.Errorf("partition name %q is not a valid identifier: %v", got, err)
		}
		back, ok := ParsePartitionName(c.table, c.iv, got)
		if !ok || !back.Equal(c.from) {
			t.Errorf("ParsePartitionName(%q) = %s, %v; want %s, true", got, back, ok, c.from)
		}
	}
	rejects := []struct {
		iv   Interval
		name string
	}{
		{Daily, "processed_event_p2024022"},     // short
		{Daily, "processed_event_p2024022x"},    // not digits
		{Daily, "processed_event_p20240230"},    // no Feb 30
		{Daily, "processed_event_p2024022900"},  // hourly stamp on a daily table
		{Weekly, "processed_event_p20240102"},   // a Tuesday
		{Monthly, "processed_event_p202413"},    // no month 13
		{Hourly, "processed_event_p2024010124"}, // no hour 24
		{Daily, "other_p20240101"},
		{Daily, "processed_event_x_p20240101"},
		{Daily, "processed_event_p19691231"}, // before the epoch
		{Daily, "processed_event_p+2024010"},
	}
	for _, r := range rejects {
		if at, ok := ParsePartitionName("processed_event", r.iv, r.name); ok {
			t.Errorf("ParsePartitionName(%s, %q) accepted it as %s", r.iv, r.name, at)
		}
	}
}

func TestPlanPartitions(t *testing.T) {
	const table = "processed_event"
	day := 24 * time.Hour
	part := func(iv Interval, from time.Time) Partition { return iv.partition(table, from) }

	t.Run("empty daily table gets the retention window and premade days", func(t *testing.T) {
		now := utc(2024, 2, 28, 13, 0)
		plan := PlanPartitions(now, Daily, 3, 72*time.Hour, table, nil)
		// now-retention is Feb 25 13:00, so Feb 25 is the oldest slot; Feb 28
		// is current, then three more days: Feb 29, Mar 1, Mar 2.
		want := []string{"processed_event_p20240225", "processed_event_p20240226", "processed_event_p20240227",
			"processed_event_p20240228", "processed_event_p20240229", "processed_event_p20240301", "processed_event_p20240302"}
		if got := names(plan.Create); !slices.Equal(got, want) {
			t.Fatalf("Create = %v, want %v", got, want)
		}
		if len(plan.Drop)+len(plan.Keep)+len(plan.Foreign) != 0 {
			t.Fatalf("unexpected Drop/Keep/Foreign: %+v", plan)
		}
	})

	t.Run("retention edge: drop only when the whole range is older", func(t *testing.T) {
		var existing []ObservedPartition
		for h := 5; h <= 12; h++ {
			existing = append(existing, observed(part(Hourly, utc(2024, 1, 1, h, 0))))
		}
		// now-retention = 08:00 exactly: [07,08) ends at it and goes, [08,09) stays.
		plan := PlanPartitions(utc(2024, 1, 1, 10, 0), Hourly, 2, 2*time.Hour, table, existing)
		if got, want := names(plan.Drop), []string{"processed_event_p2024010105", "processed_event_p2024010106", "processed_event_p2024010107"}; !slices.Equal(got, want) {
			t.Fatalf("Drop = %v, want %v", got, want)
		}
		if len(plan.Create) != 0 {
			t.Fatalf("Create = %v, want none (08..12 cover now+2)", names(plan.Create))
		}
		// One millisecond earlier, 07:00-08:00 still intersects the window.
		plan = PlanPartitions(utc(2024, 1, 1, 10, 0).Add(-time.Millisecond), Hourly, 2, 2*time.Hour, table, existing)
		if got, want := names(plan.Drop), []string{"processed_event_p2024010105", "processed_event_p2024010106"}; !slices.Equal(got, want) {
			t.Fatalf("Drop = %v, want %v", got, want)
		}
	})

	t.Run("premake zero makes only the current slot", func(t *testing.T) {
		plan := PlanPartitions(utc(2024, 1, 1, 10, 30), Hourly, 0, 30*time.Minute, table, nil)
		if got, want := names(plan.Create), []string{"processed_event_p2024010110"}; !slices.Equal(got, want) {
			t.Fatalf("Create = %v, want %v", got, want)
		}
		// Negative values count as zero.
		if got := names(PlanPartitions(utc(2024, 1, 1, 10, 30), Hourly, -4, -time.Hour, table, nil).Create); !slices.Equal(got, []string{"processed_event_p2024010110"}) {
			t.Fatalf("negative premake/retention: Create = %v", got)
		}
	})

	t.Run("fills gaps between existing partitions", func(t *testing.T) {
		existing := []ObservedPartition{
			observed(part(Daily, utc(2024, 2, 27, 0, 0))),
			observed(part(Daily, utc(2024, 3, 4, 0, 0))), // beyond premake: kept, and the gap up to it filled
		}
		plan := PlanPartitions(utc(2024, 2, 28, 1, 0), Daily, 1, day, table, existing)
		want := []string{"processed_event_p20240228", "processed_event_p20240229", "processed_event_p20240301",
			"processed_event_p20240302", "processed_event_p20240303"}
		if got := names(plan.Create); !slices.Equal(got, want) {
			t.Fatalf("Create = %v, want %v", got, want)
		}
		if got := names(plan.Keep); !slices.Equal(got, []string{"processed_event_p20240227", "processed_event_p20240304"}) {
			t.Fatalf("Keep = %v", got)
		}
	})

	t.Run("weekly across the year end starts on Mondays", func(t *testing.T) {
		plan := PlanPartitions(utc(2020, 12, 31, 12, 0), Weekly, 2, 14*day, table, nil)
		want := []string{"processed_event_p20201214", "processed_event_p20201221", "processed_event_p20201228",
			"processed_event_p20210104", "processed_event_p20210111"}
		if got := names(plan.Create); !slices.Equal(got, want) {
			t.Fatalf("Create = %v, want %v", got, want)
		}
		for _, p := range plan.Create {
			if p.From.Weekday() != time.Monday || !p.To.Equal(p.From.AddDate(0, 0, 7)) {
				t.Fatalf("%s = [%s, %s) is not a Monday-to-Monday week", p.Name, p.From, p.To)
			}
		}
	})

	t.Run("monthly over a leap February", func(t *testing.T) {
		plan := PlanPartitions(time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC), Monthly, 1, 31*day, table, nil)
		if got, want := names(plan.Create), []string{"processed_event_p202401", "processed_event_p202402", "processed_event_p202403"}; !slices.Equal(got, want) {
			t.Fatalf("Create = %v, want %v", got, want)
		}
		feb := plan.Create[1]
		if !feb.To.Equal(utc(2024, 3, 1, 0, 0)) || feb.To.Sub(feb.From) != 29*day {
			t.Fatalf("February 2024 = [%s, %s), want 29 days", feb.From, feb.To)
		}
	})

	t.Run("hourly across the year end", func(t *testing.T) {
		plan := PlanPartitions(utc(2023, 12, 31, 23, 30), Hourly, 2, time.Hour, table, nil)
		want := []string{"processed_event_p2023123122", "processed_event_p2023123123", "processed_event_p2024010100", "processed_event_p2024010101"}
		if got := names(plan.Create); !slices.Equal(got, want) {
			t.Fatalf("Create = %v, want %v", got, want)
		}
	})

	t.Run("foreign partitions are reported and never overlapped", func(t *testing.T) {
		mar1 := part(Daily, utc(2024, 3, 1, 0, 0))
		misnamed := observed(part(Daily, utc(2024, 2, 28, 0, 0)))
		misnamed.Name = "manual_feb28"
		shifted := observed(mar1)
		shifted.From = BoundaryUUID(utc(2024, 3, 1, 0, 0).Add(time.Millisecond)) // our name, not our bounds
		other := observed(part(Daily, utc(2024, 3, 2, 0, 0)))
		other.Name = "elsewhere.processed_event_p20240302" // our name in another schema
		deflt := ObservedPartition{Name: "processed_event_default", Bound: "DEFAULT", Default: true}
		low := ObservedPartition{Name: "ancient", FromMin: true, To: BoundaryUUID(utc(2024, 2, 27, 12, 0))}
		existing := []ObservedPartition{misnamed, shifted, other, deflt, low}

		plan := PlanPartitions(utc(2024, 2, 28, 1, 0), Daily, 4, 2*day, table, existing)
		if got, want := plan.Foreign, []string{"ancient", "elsewhere.processed_event_p20240302", "manual_feb28", "processed_event_default", "processed_event_p20240301"}; !slices.Equal(got, want) {
			t.Fatalf("Foreign = %v, want %v", got, want)
		}
		// Feb 26 and 27 overlap "ancient" (MINVALUE..Feb 27 12:00), Feb 28 is
		// taken by manual_feb28, Mar 1 by the shifted one, Mar 2 by the other
		// schema's: of Feb 26 to Mar 3 (premake 4), only Feb 29 and Mar 3 are free.
		if got, want := names(plan.Create), []string{"processed_event_p20240229", "processed_event_p20240303"}; !slices.Equal(got, want) {
			t.Fatalf("Create = %v, want %v", got, want)
		}
		if len(plan.Drop) != 0 {
			t.Fatalf("Drop = %v, want nothing (foreign partitions are never dropped)", names(plan.Drop))
		}
	})

	t.Run("the plan converges: applying it leaves nothing to do", func(t *testing.T) {
		now := utc(2024, 12, 31, 23, 0)
		for _, iv := range []Interval{Hourly, Daily, Weekly, Monthly} {
			plan := PlanPartitions(now, iv, 4, 40*day, table, nil)
			var existing []ObservedPartition
			for _, p := range plan.Create {
				existing = append(existing, observed(p))
			}
			again := PlanPartitions(now, iv, 4, 40*day, table, existing)
			if len(again.Create)+len(again.Drop) != 0 {
				t.Fatalf("%s: second plan not empty: create %v drop %v", iv, names(again.Create), names(again.Drop))
			}
			// A day later, exactly the slots that aged out go and new ones come.
			later := PlanPartitions(now.Add(day), iv, 4, 40*day, table, existing)
			for _, p := range later.Drop {
				if p.To.After(now.Add(day).Add(-40 * day)) {
					t.Fatalf("%s: dropped %s which still intersects the window", iv, p.Name)
				}
			}
		}
	})

	t.Run("span is capped at MaxPartitions, newest kept", func(t *testing.T) {
		now := utc(2024, 6, 1, 0, 0)
		plan := PlanPartitions(now, Hourly, 10, 10*365*day, table, nil)
		if len(plan.Create) != MaxPartitions {
			t.Fatalf("created %d partitions, want the cap %d", len(plan.Create), MaxPartitions)
		}
		if last := plan.Create[len(plan.Create)-1]; !last.To.Equal(now.Add(11 * time.Hour)) {
			t.Fatalf("newest partition ends %s, want %s", last.To, now.Add(11*time.Hour))
		}
	})

	t.Run("invalid input plans nothing and touches nothing", func(t *testing.T) {
		existing := []ObservedPartition{observed(part(Daily, utc(2000, 1, 1, 0, 0)))}
		for _, c := range []struct {
			iv    Interval
			table string
		}{{"Yearly", table}, {Daily, "Bad-Name"}, {Daily, strings.Repeat("x", MaxTableNameLen+1)}} {
			plan := PlanPartitions(utc(2024, 1, 1, 0, 0), c.iv, 3, day, c.table, existing)
			if len(plan.Create)+len(plan.Drop)+len(plan.Keep) != 0 || len(plan.Foreign) != 1 {
				t.Fatalf("%s %q: plan = %+v, want only the existing one reported as foreign", c.iv, c.table, plan)
			}
		}
	})
}

func TestValidatePolicy(t *testing.T) {
	day := 24 * time.Hour
	ok := []struct {
		iv        Interval
		premake   int
		retention time.Duration
	}{
		{Hourly, 24, 30 * day},
		{Daily, 7, 365 * day},
		{Weekly, 4, 5 * 365 * day},
		{Monthly, 2, 10 * 365 * day},
	}
	for _, c := range ok {
		if err := ValidatePolicy(c.iv, c.premake, c.retention); err != nil {
			t.Errorf("ValidatePolicy(%s, %d, %s) = %v, want nil", c.iv, c.premake, c.retention, err)
		}
	}
	bad := []struct {
		iv        Interval
		premake   int
		retention time.Duration
	}{
		{"Yearly", 1, day},
		{Daily, -1, day},
		{Daily, 1, 0},
		{Daily, 1, -day},
		{Hourly, 1, 200 * day}, // 4800 hourly partitions
		{Daily, MaxPartitions, day},
	}
	for _, c := range bad {
		if err := ValidatePolicy(c.iv, c.premake, c.retention); err == nil {
			t.Errorf("ValidatePolicy(%s, %d, %s) = nil, want an error", c.iv, c.premake, c.retention)
		}
	}
}
