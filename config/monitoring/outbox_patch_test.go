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

package monitoring_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// runbookOverlay returns the kustomization that docs/runbooks.md shows to
// change IdempotentOutboxBehind's threshold.
func runbookOverlay(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], "value: IdempotentOutboxBehind") {
			return m[1]
		}
	}
	t.Fatal("docs/runbooks.md has no yaml block patching IdempotentOutboxBehind")
	return ""
}

// renderOverlay builds the overlay kustomization k on top of config/monitoring,
// laid out as in the repository, and returns the rendered PrometheusRule.
func renderOverlay(t *testing.T, k string) (promRule, error) {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	files, err := filepath.Glob("*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".yaml") && !strings.HasSuffix(f, ".json") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile("/repo/config/monitoring/"+f, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.WriteFile("/repo/overlays/prod/kustomization.yaml", []byte(k)); err != nil {
		t.Fatal(err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/repo/overlays/prod")
	if err != nil {
		return promRule{}, err
	}
	for _, r := range res.Resources() {
		if r.GetKind() != "PrometheusRule" {
			continue
		}
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var pr promRule
		if err := yaml.UnmarshalStrict(y, &pr); err != nil {
			t.Fatal(err)
		}
		return pr, nil
	}
	t.Fatal("the overlay renders no PrometheusRule")
	return promRule{}, nil
}

// TestOutboxBehindThresholdPatch applies the runbook's patch: it changes
// IdempotentOutboxBehind's threshold and `for`, and nothing else; and its
// test operation refuses a rule file where another alert sits at that place.
func TestOutboxBehindThresholdPatch(t *testing.T) {
	k := runbookOverlay(t)
	got, err := renderOverlay(t, k)
	if err != nil {
		t.Fatalf("kustomize build of the runbook's overlay: %v", err)
	}
	want := loadRule(t)
	if len(got.Spec.Groups) != len(want.Spec.Groups) {
		t.Fatalf("the overlay has %d rule groups, the base %d", len(got.Spec.Groups), len(want.Spec.Groups))
	}
	changed := 0
	for gi, g := range want.Spec.Groups {
		for ri, r := range g.Rules {
			o := got.Spec.Groups[gi].Rules[ri]
			if r.Alert != "IdempotentOutboxBehind" {
				if o.Expr != r.Expr || o.For != r.For || o.Alert != r.Alert {
					t.Errorf("the patch changed %s", r.Alert)
				}
				continue
			}
			changed++
			if !strings.HasSuffix(strings.TrimSpace(o.Expr), "> 900") || o.For != "10m" {
				t.Errorf("IdempotentOutboxBehind after the patch: expr %q, for %s; want > 900 for 10m", o.Expr, o.For)
			}
			// The rest of the expression is the base's.
			if strings.TrimSuffix(strings.TrimSpace(o.Expr), "> 900") != strings.TrimSuffix(strings.TrimSpace(r.Expr), "> 300") {
				t.Errorf("the patched expression %q differs from the base's %q beyond the threshold", o.Expr, r.Expr)
			}
		}
	}
	if changed != 1 {
		t.Errorf("IdempotentOutboxBehind found %d times", changed)
	}
	// If the rule moves, the patch fails instead of replacing another rule.
	moved := strings.Replace(k, "/spec/groups/2/rules/0/alert", "/spec/groups/1/rules/0/alert", 1)
	if moved == k {
		t.Fatal("the runbook's patch does not test /spec/groups/2/rules/0/alert")
	}
	if _, err := renderOverlay(t, moved); err == nil {
		t.Error("a patch whose test operation names another rule was applied")
	}
}
