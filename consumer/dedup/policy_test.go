package dedup

import (
	"testing"
	"time"
)

// TestPolicyDefaults: zero fields take the defaults, set ones are kept,
// negative ones are left for Validate; the defaults themselves are valid.
func TestPolicyDefaults(t *testing.T) {
	got := Policy{}.WithDefaults()
	want := Policy{Interval: Daily, Premake: 4, Retention: 168 * time.Hour}
	if got != want {
		t.Fatalf("Policy{}.WithDefaults() = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("the default policy does not validate: %v", err)
	}
	set := Policy{Interval: Hourly, Premake: 2, Retention: time.Hour}
	if got := set.WithDefaults(); got != set {
		t.Fatalf("WithDefaults changed a set policy: %+v, want %+v", got, set)
	}
	if err := (Policy{Premake: -1}).WithDefaults().Validate(); err == nil {
		t.Fatal("a negative premake validated after WithDefaults")
	}
	if err := (Policy{}).Validate(); err == nil {
		t.Fatal("the zero policy (no interval, no retention) validated without defaults")
	}
}

// TestPolicyPlan: Plan is PlanPartitions with the policy's fields.
func TestPolicyPlan(t *testing.T) {
	now := time.Date(2024, 2, 29, 22, 30, 0, 0, time.UTC)
	p := Policy{Interval: Hourly, Premake: 3, Retention: 3 * time.Hour}
	got := names(p.Plan(now, "processed_event", nil).Create)
	want := names(PlanPartitions(now, Hourly, 3, 3*time.Hour, "processed_event", nil).Create)
	if len(got) != 7 || len(got) != len(want) {
		t.Fatalf("Plan created %v, PlanPartitions %v; want 7 each", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("Plan created %v, PlanPartitions %v", got, want)
		}
	}
}
