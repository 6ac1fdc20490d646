package consumer_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportBoundary keeps the runtime importable on its own: no package under
// consumer/ may depend, even indirectly, on controller-runtime, client-go, any
// k8s.io module, or the operator's own packages (api/, controllers/, cmd/).
// Test-only imports count too, so a test can't drag the operator in.
func TestImportBoundary(t *testing.T) {
	const module = "github.com/idempotency-dev/operator"
	forbidden := []string{
		"sigs.k8s.io/controller-runtime",
		"k8s.io/",
		module + "/api",
		module + "/controllers",
		module + "/cmd",
		module + "/internal/controller",
	}
	cmd := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Deps,Imports,ForTest", "./...")
	cmd.Dir = "."
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	type pkg struct {
		ImportPath string
		Imports    []string
		Deps       []string
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		// Only our own packages under consumer/ are checked; -deps lists
		// every dependency as well.
		path := strings.Fields(p.ImportPath)[0] // "x [x.test]" for test variants
		if !strings.HasPrefix(path, module+"/consumer") {
			continue
		}
		seen++
		for _, d := range append(p.Imports, p.Deps...) {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(d[len(f):], "/")) {
					t.Errorf("%s imports %s (forbidden: %s)", p.ImportPath, d, f)
				}
			}
		}
	}
	if seen < 3 {
		t.Fatalf("checked only %d packages under consumer/; go list output looks wrong", seen)
	}
}

// TestPackageLayers keeps the runtime's packages in layers with one-way
// dependencies (docs/architecture.md, "The runtime's packages"): each
// package may import only the packages of the runtime listed for it here, so
// the public face (consumer) may import the internals and never the
// reverse, the two pipelines never import each other, and the leaf
// packages import nothing of the runtime. A new package must be added here.
func TestPackageLayers(t *testing.T) {
	const mod = "github.com/idempotency-dev/operator/consumer"
	allowed := map[string][]string{
		"envelope":            nil,
		"version":             nil,
		"envvars":             nil,
		"event":               {"envelope"},
		"dedup":               nil,
		"dedup/migrate":       {"dedup"},
		"internal/redact":     nil,
		"internal/backoff":    nil,
		"internal/broker":     nil,
		"internal/record":     {"event", "envelope"},
		"internal/telemetry":  {"event", "internal/record", "internal/redact", "version"},
		"internal/membudget":  {"internal/telemetry"},
		"internal/deadletter": {"event", "internal/broker", "internal/record", "internal/redact"},
		"replay":              {"event"},
		"internal/partition": {"event", "envelope", "dedup", "internal/record", "internal/telemetry", "internal/broker",
			"internal/deadletter", "internal/membudget", "internal/backoff", "internal/redact"},
		"internal/txpipe": {"event", "envelope", "dedup", "internal/partition", "internal/record", "internal/telemetry",
			"internal/backoff", "internal/redact"},
		"internal/extpipe": {"event", "envelope", "dedup", "internal/partition", "internal/record", "internal/telemetry",
			"internal/backoff", "internal/redact"},
		// The replay engine runs the live pipelines over partition.Workers
		// it is handed; it never imports a pipeline.
		"internal/replay": {"replay", "event", "envelope", "dedup", "internal/partition", "internal/record",
			"internal/broker", "internal/redact"},
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(p.ImportPath, mod+"/")
		list, listed := allowed[rel]
		if !ok || !listed && !strings.HasPrefix(rel, "internal/") {
			continue // the public face and its tools (consumer, app, sink, consumertest) may import anything below
		}
		checked++
		for _, imp := range p.Imports {
			dep, ours := strings.CutPrefix(imp, mod+"/")
			if imp == mod {
				dep, ours = ".", true
			}
			if !ours {
				continue
			}
			if !listed {
				t.Errorf("%s is not in the layer table of TestPackageLayers: add it", rel)
				break
			}
			if !slices.Contains(list, dep) {
				t.Errorf("%s imports %s, which its layer does not allow (allowed: %v)", rel, dep, list)
			}
		}
	}
	if checked < len(allowed)-2 {
		t.Fatalf("checked %d packages; go list output looks wrong", checked)
	}
}
