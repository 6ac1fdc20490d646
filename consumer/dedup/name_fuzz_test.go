package dedup

import (
	"testing"
	"time"
)

// FuzzPartitionName checks partition name derivation for any valid table
// name, interval and instant: the name is a valid identifier within
// PostgreSQL's 63 bytes, ParsePartitionName inverts it to the slot start,
// neighbouring slots get different names, and arbitrary strings never parse
// to a slot whose name differs from them.
func FuzzPartitionName(f *testing.F) {
	f.Add("processed_event", uint8(0), int64(1704067200), "processed_event_p2024010100")
	f.Add("t", uint8(2), int64(951782400), "t_p20000228")
	f.Add("a234567890123456789012345678901234567890123456789x", uint8(3), int64(4102444799), "x_p202401")
	intervals := []Interval{Hourly, Daily, Weekly, Monthly}
	f.Fuzz(func(t *testing.T, table string, ivn uint8, unix int64, other string) {
		if ValidateIdentifier(table) != nil || len(table) > MaxTableNameLen {
			return
		}
		iv := intervals[int(ivn)%len(intervals)]
		// Years 1970..2999: the range a UUID v7 timestamp can meaningfully hold here.
		at := time.Unix(0, 0).UTC().Add(time.Duration(uint64(unix)%(1030*365*24*3600)) * time.Second)
		start := iv.Floor(at)
		name := PartitionName(table, iv, start)
		if len(name) > 63 {
			t.Fatalf("%q is %d bytes, over PostgreSQL's 63", name, len(name))
		}
		if err := ValidateIdentifier(name); err != nil {
			t.Fatalf("derived name %q is not a valid identifier: %v", name, err)
		}
		got, ok := ParsePartitionName(table, iv, name)
		if !ok || !got.Equal(start) {
			t.Fatalf("ParsePartitionName(%q) = %v, %v; want %v", name, got, ok, start)
		}
		if n := PartitionName(table, iv, iv.Next(start)); n == name {
			t.Fatalf("slots %v and the next share the name %q", start, name)
		}
		if n := PartitionName(table, iv, iv.Prev(start)); n == name {
			t.Fatalf("slots %v and the previous share the name %q", start, name)
		}
		if s, ok := ParsePartitionName(table, iv, other); ok {
			if PartitionName(table, iv, s) != other {
				t.Fatalf("%q parsed to slot %v, whose name is %q", other, s, PartitionName(table, iv, s))
			}
		}
	})
}
