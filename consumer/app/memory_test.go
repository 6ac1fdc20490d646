package app

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/idempotency-dev/operator/consumer/envvars"
)

func TestMemoryLimitSetsBudgetAndGoLimit(t *testing.T) {
	m := base()
	m[envvars.MemoryLimit] = "268435456" // 256Mi, as the downward API gives it
	o, err := Parse(nil, env(m), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.MemoryLimit != 256<<20 || o.Consumer.MemoryBudget != 128<<20 || o.GoMemLimitSet {
		t.Fatalf("limit %d budget %d gomemlimit set %v; want 256 MiB, 128 MiB, false", o.MemoryLimit, o.Consumer.MemoryBudget, o.GoMemLimitSet)
	}
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	applyMemoryLimit(o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := debug.SetMemoryLimit(-1); got != 256<<20*70/100 {
		t.Fatalf("Go memory limit %d, want 70%% of 256 MiB", got)
	}

	// GOMEMLIMIT wins over the container's limit; the budget still applies.
	debug.SetMemoryLimit(math.MaxInt64)
	m["GOMEMLIMIT"] = "100MiB"
	if o, err = Parse(nil, env(m), io.Discard); err != nil {
		t.Fatal(err)
	}
	applyMemoryLimit(o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 || !o.GoMemLimitSet || o.Consumer.MemoryBudget != 128<<20 {
		t.Fatalf("with GOMEMLIMIT set: Go limit changed to %d (set %v), budget %d", got, o.GoMemLimitSet, o.Consumer.MemoryBudget)
	}

	// Unset: unbounded, as before.
	delete(m, envvars.MemoryLimit)
	if o, err = Parse(nil, env(m), io.Discard); err != nil || o.Consumer.MemoryBudget != 0 {
		t.Fatalf("without a limit: budget %d, err %v", o.Consumer.MemoryBudget, err)
	}
}

func TestMemoryLimitInvalid(t *testing.T) {
	for _, bad := range []string{"256Mi", "-1", "lots"} {
		m := base()
		m[envvars.MemoryLimit] = bad
		_, err := Parse(nil, env(m), io.Discard)
		if err == nil || !strings.Contains(err.Error(), envvars.MemoryLimit) || !strings.Contains(err.Error(), "bytes") {
			t.Errorf("%q: want an error naming %s, got %v", bad, envvars.MemoryLimit, err)
		}
	}
}
