package objects

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNeedsNoClient: the builders stay pure functions of the API types; the
// package links no Kubernetes client, no controller-runtime and no database
// driver (those are the reconciler's, in controllers/).
func TestNeedsNoClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list: skipped with -short")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list listed only %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for _, forbidden := range []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "github.com/jackc/pgx"} {
			if d == forbidden || strings.HasPrefix(d, forbidden+"/") {
				t.Errorf("controllers/objects links %s", d)
			}
		}
	}
}
