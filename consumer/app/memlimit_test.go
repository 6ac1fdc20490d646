package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/envvars"
)

// fakeCgroup makes a cgroup mount and /proc/self/cgroup under a test
// directory: self is the membership file's text, files the mount's files.
func fakeCgroup(t *testing.T, self string, files map[string]string) cgroupFS {
	t.Helper()
	dir := t.TempDir()
	c := cgroupFS{root: filepath.Join(dir, "sys", "fs", "cgroup"), self: filepath.Join(dir, "self-cgroup")}
	if err := os.WriteFile(c.self, []byte(self), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		p := filepath.Join(c.root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		self  string
		files map[string]string
		limit int64
		found bool
	}{
		{"v2 in the container's namespace", "0::/\n", map[string]string{"memory.max": "536870912\n"}, 512 << 20, true},
		{"v2 no limit", "0::/\n", map[string]string{"memory.max": "max\n"}, 0, true},
		{"v2 by the process's path", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "268435456", "memory.max": "max"}, 256 << 20, true},
		{"v1", "5:cpu:/\n4:memory:/kubepods/pod1\n0::/\n", map[string]string{"memory/kubepods/pod1/memory.limit_in_bytes": "134217728\n"}, 128 << 20, true},
		{"v1 no limit", "4:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, true},
		{"none", "0::/\n", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit, _, found, err := fakeCgroup(t, tc.self, tc.files).memoryLimit()
			if err != nil || limit != tc.limit || found != tc.found {
				t.Fatalf("memoryLimit = %d, found %v, err %v; want %d, %v", limit, found, err, tc.limit, tc.found)
			}
		})
	}
	if _, _, _, err := fakeCgroup(t, "0::/\n", map[string]string{"memory.max": "lots"}).memoryLimit(); err == nil {
		t.Fatal("an unreadable memory.max: no error")
	}
}

// The cgroup's limit wins over the downward-API variable; without one (no
// file, or "max") the variable's stays.
func TestMemoryLimitFromCgroup(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := base()
	m[envvars.MemoryLimit] = "268435456"
	o, err := Parse(nil, env(m), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	resolveMemoryLimit(&o, fakeCgroup(t, "0::/\n", map[string]string{"memory.max": "536870912"}), log)
	if o.MemoryLimit != 512<<20 || o.Consumer.MemoryBudget != 256<<20 {
		t.Fatalf("with memory.max 512 MiB: limit %d budget %d, want 512 MiB, 256 MiB", o.MemoryLimit, o.Consumer.MemoryBudget)
	}
	for _, files := range []map[string]string{nil, {"memory.max": "max"}} {
		o, _ := Parse(nil, env(m), io.Discard)
		resolveMemoryLimit(&o, fakeCgroup(t, "0::/\n", files), log)
		if o.MemoryLimit != 256<<20 || o.Consumer.MemoryBudget != 128<<20 {
			t.Fatalf("cgroup files %v: limit %d budget %d, want the variable's 256 MiB, 128 MiB", files, o.MemoryLimit, o.Consumer.MemoryBudget)
		}
	}
}

// An in-place resize changes memory.max; the Go memory limit follows.
func TestMemoryLimitFollowsResize(t *testing.T) {
	prevRecheck := memoryRecheck.Swap(int64(10 * time.Millisecond))
	t.Cleanup(func() { memoryRecheck.Store(prevRecheck) })
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := fakeCgroup(t, "0::/\n", map[string]string{"memory.max": "268435456"})
	o := Options{}
	resolveMemoryLimit(&o, c, log)
	applyMemoryLimit(o, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	budgets := make(chan int64, 4)
	go func() { defer close(done); followMemoryLimit(ctx, o, c, log, func(b int64) { budgets <- b }) }()
	defer func() { cancel(); <-done }()

	if err := os.WriteFile(filepath.Join(c.root, "memory.max"), []byte("1073741824\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := int64(1<<30) * GoMemLimitPercent / 100
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got := debug.SetMemoryLimit(-1); got == want {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after the resize to 1 GiB the Go memory limit is %d, want %d", got, want)
		}
	}
	// The record budget follows too (Consumer.SetMemoryBudget).
	select {
	case got := <-budgets:
		if want := int64(1<<30) * MemoryBudgetPercent / 100; got != want {
			t.Fatalf("record budget after the resize %d, want %d", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the record budget was not passed on after the resize")
	}
}
