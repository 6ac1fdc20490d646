/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

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
