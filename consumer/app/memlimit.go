package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The container's memory limit is read from its cgroup when there is one:
// the downward-API variable (CONSUMER_MEMORY_LIMIT) is set when the Pod is
// made and an in-place resize of the Pod never changes it, while the
// cgroup's limit is the one the kernel enforces. The variable remains the
// fallback (no cgroup file readable, or no limit in it).

// cgroupFS is where the cgroup files are: the mount (normally /sys/fs/cgroup)
// and the process's own membership (/proc/self/cgroup). Tests point it at a
// directory of their own.
type cgroupFS struct {
	root, self string
}

var hostCgroup = cgroupFS{root: "/sys/fs/cgroup", self: "/proc/self/cgroup"}

// memoryRecheck is how often the cgroup's limit is read again, in
// nanoseconds: atomic, since a test shortens it while the follower of an
// earlier test's run may still be starting.
var memoryRecheck = func() *atomic.Int64 {
	var d atomic.Int64
	d.Store(int64(15 * time.Second))
	return &d
}()

// v1Unlimited: cgroup v1 reports "no limit" as the largest page-aligned
// int64 (9223372036854771712); anything this large is no limit.
const v1Unlimited = int64(1) << 62

// memoryLimit returns the cgroup's memory limit in bytes and the file it
// came from; found is false when no cgroup memory file was readable, and
// the limit is 0 when the file says there is none ("max").
func (c cgroupFS) memoryLimit() (limit int64, file string, found bool, err error) {
	var v2, v1 string // the process's cgroup paths, from /proc/self/cgroup
	if f, err := os.Open(c.self); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				v2 = parts[2]
			case strings.Contains(","+parts[1]+",", ",memory,"):
				v1 = parts[2]
			}
		}
		_ = f.Close()
	}
	// Inside a container's cgroup namespace the process's path is "/" and
	// the mount's root is its own cgroup; outside, its path names it.
	var candidates []string
	if v2 != "" && v2 != "/" {
		candidates = append(candidates, filepath.Join(c.root, v2, "memory.max"))
	}
	candidates = append(candidates, filepath.Join(c.root, "memory.max"))
	if v1 != "" && v1 != "/" {
		candidates = append(candidates, filepath.Join(c.root, "memory", v1, "memory.limit_in_bytes"))
	}
	candidates = append(candidates, filepath.Join(c.root, "memory", "memory.limit_in_bytes"))
	for _, p := range candidates {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, p, false, fmt.Errorf("reading %s: %w", p, err)
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, p, true, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, p, false, fmt.Errorf("reading %s: %q is not a number of bytes", p, s)
		}
		if n >= v1Unlimited {
			return 0, p, true, nil
		}
		return n, p, true, nil
	}
	return 0, "", false, nil
}

// resolveMemoryLimit sets opts.MemoryLimit (and the record budget derived
// from it) from the cgroup when it has a limit; otherwise the variable's
// value stays.
func resolveMemoryLimit(opts *Options, c cgroupFS, log *slog.Logger) {
	limit, file, found, err := c.memoryLimit()
	switch {
	case err != nil:
		log.Warn("cannot read the cgroup's memory limit; using CONSUMER_MEMORY_LIMIT", "err", err)
	case found && limit > 0:
		if opts.MemoryLimit != limit {
			log.Info("memory limit from the cgroup", "file", file, "limit", limit, "variable", opts.MemoryLimit)
		}
		opts.MemoryLimit = limit
		opts.Consumer.MemoryBudget = percentOf(limit, MemoryBudgetPercent)
	}
}

// followMemoryLimit reads the cgroup's limit every memoryRecheck until ctx
// ends and, when an in-place resize changed it, sets the Go memory limit
// again (unless GOMEMLIMIT is set) and passes the record budget derived
// from it to setBudget (Consumer.SetMemoryBudget: the batches at once, the
// readers at the next rebalance; a consumer started without a limit stays
// unbounded).
func followMemoryLimit(ctx context.Context, opts Options, c cgroupFS, log *slog.Logger, setBudget func(int64)) {
	current := opts.MemoryLimit
	t := time.NewTicker(time.Duration(memoryRecheck.Load()))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		limit, file, found, err := c.memoryLimit()
		if err != nil || !found || limit == current {
			continue
		}
		log.Info("the cgroup's memory limit changed (an in-place resize)", "file", file, "from", current, "to", limit)
		current = limit
		if limit > 0 && setBudget != nil {
			setBudget(percentOf(limit, MemoryBudgetPercent))
		}
		if opts.GoMemLimitSet {
			continue
		}
		if limit > 0 {
			debug.SetMemoryLimit(percentOf(limit, GoMemLimitPercent))
		} else {
			debug.SetMemoryLimit(math.MaxInt64) // the runtime's "no limit"
		}
	}
}
