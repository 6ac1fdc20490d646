package consumer_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
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
