package migrate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestDefaultsAgreeWithDedup: a Config that leaves the policy out migrates
// with the policy dedup defaults to (so with what an IdempotentConsumer
// without spec.dedup.premake and retention maintains), and the exported
// defaults are dedup's.
func TestDefaultsAgreeWithDedup(t *testing.T) {
	want := dedup.Policy{}.WithDefaults()
	if got := (Config{}).withDefaults().policy(); got != want {
		t.Fatalf("migrate's default policy %+v, dedup's %+v", got, want)
	}
	if DefaultPremake != want.Premake || DefaultRetention != want.Retention {
		t.Fatalf("migrate.DefaultPremake, DefaultRetention = %d, %s; dedup's %d, %s", DefaultPremake, DefaultRetention, want.Premake, want.Retention)
	}
	set := Config{Table: dedup.Table{Interval: dedup.Hourly}, Premake: 2, Retention: 5 * time.Hour}.withDefaults().policy()
	if want := (dedup.Policy{Interval: dedup.Hourly, Premake: 2, Retention: 5 * time.Hour}); set != want {
		t.Fatalf("a set policy became %+v, want %+v", set, want)
	}
	err := Config{Premake: -1, Group: "g"}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate with premake -1 = %v, want ErrInvalidConfig", err)
	}
	if want := (dedup.Policy{Interval: dedup.Daily, Premake: -1, Retention: DefaultRetention}).Validate(); want == nil || !strings.Contains(err.Error(), want.Error()) {
		t.Fatalf("Validate with premake -1 = %v, want it to carry dedup's %v", err, want)
	}
}
