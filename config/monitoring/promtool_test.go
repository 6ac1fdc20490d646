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
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// unitRule is the part of a PrometheusRule (or a Prometheus rules file) the
// unit tests need.
type unitRule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type unitGroup struct {
	Name  string     `json:"name"`
	Rules []unitRule `json:"rules"`
}

// promtoolTests is the part of a `promtool test rules` file the coverage
// check reads.
type promtoolTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlertRulesFire runs `promtool test rules` on alerts_test.yaml against
// the alerts of prometheusrule.yaml: each alert fires on its condition, only
// after its `for`, and stays quiet for a healthy object. promtool comes with
// Debian's prometheus package (.ci/run installs it); without it the test is
// skipped locally and fails in CI.
func TestAlertRulesFire(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool not found on PATH (.ci/run installs Debian's prometheus package): %v", err)
		}
		t.Skip("promtool not found on PATH; install Debian's prometheus package to run the alert unit tests")
	}

	raw, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec struct {
			Groups []unitGroup `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &pr); err != nil {
		t.Fatalf("parsing prometheusrule.yaml: %v", err)
	}
	var alerts []string
	for gi := range pr.Spec.Groups {
		for ri := range pr.Spec.Groups[gi].Rules {
			r := &pr.Spec.Groups[gi].Rules[ri]
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			// Descriptions and runbook links are checked by the other tests
			// here; the unit tests compare the summary only.
			r.Annotations = map[string]string{"summary": r.Annotations["summary"]}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts found in prometheusrule.yaml")
	}

	// Every alert needs a case where it fires and one where it stays quiet.
	testsRaw, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests promtoolTests
	if err := yaml.Unmarshal(testsRaw, &tests); err != nil {
		t.Fatalf("parsing alerts_test.yaml: %v", err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tg := range tests.Tests {
		for _, a := range tg.AlertRuleTest {
			if !slices.Contains(alerts, a.Alertname) {
				t.Errorf("alerts_test.yaml, test %q: alert %q is not in prometheusrule.yaml", tg.Name, a.Alertname)
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range alerts {
		if !fires[a] {
			t.Errorf("alerts_test.yaml has no case where %s fires", a)
		}
		if !quiet[a] {
			t.Errorf("alerts_test.yaml has no case where %s stays quiet", a)
		}
	}

	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), testsRaw, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("promtool test rules:\n%s", out)
}
