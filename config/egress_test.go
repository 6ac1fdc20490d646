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

package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// egressPorts lists a policy's egress rules as "port/protocol" per rule.
func egressPorts(p *networkingv1.NetworkPolicy) [][]string {
	var out [][]string
	for _, r := range p.Spec.Egress {
		var ports []string
		for _, port := range r.Ports {
			ports = append(ports, fmt.Sprintf("%s/%s", port.Port.String(), *port.Protocol))
		}
		out = append(out, ports)
	}
	return out
}

// managerEgress checks that an install renders the manager's egress policy
// for its manager Pod, with the documented rules in the documented order.
func managerEgress(t *testing.T, objs []*unstructured.Unstructured) *networkingv1.NetworkPolicy {
	t.Helper()
	u := find(objs, "NetworkPolicy", prefix+"manager-egress")
	if u == nil {
		t.Fatal("no manager-egress NetworkPolicy in the install")
	}
	p := typed(t, u, &networkingv1.NetworkPolicy{})
	dep := typed(t, find(objs, "Deployment", prefix+"controller-manager"), &appsv1.Deployment{})
	sel := labels.SelectorFromSet(p.Spec.PodSelector.MatchLabels)
	if p.Namespace != dep.Namespace || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) || len(p.Spec.PodSelector.MatchLabels) == 0 {
		t.Errorf("manager-egress in %s selects %v; the manager runs in %s with labels %v", p.Namespace, p.Spec.PodSelector.MatchLabels, dep.Namespace, dep.Spec.Template.Labels)
	}
	if !slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("manager-egress policy types %v, want Egress only (ingress is allow-metrics-traffic's)", p.Spec.PolicyTypes)
	}
	return p
}

// TestManagerEgressPolicy: config/default and config/namespaced render the
// manager's egress NetworkPolicy (DNS, the API server, PostgreSQL, Kafka,
// in that order: docs/security.md names them by index), and an overlay's
// patch, as the docs show it, changes one port and narrows a destination.
func TestManagerEgressPolicy(t *testing.T) {
	want := [][]string{{"53/UDP", "53/TCP"}, {"443/TCP", "6443/TCP"}, {"5432/TCP"}, {"9092/TCP", "9093/TCP"}}
	for _, dir := range []string{"default", "namespaced"} {
		p := managerEgress(t, build(t, dir))
		if got := egressPorts(p); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: manager-egress rules %v, want %v", dir, got, want)
		}
		for i, r := range p.Spec.Egress {
			if len(r.To) != 0 {
				t.Errorf("%s: rule %d has destinations %v; the default allows its ports anywhere", dir, i, r.To)
			}
		}
	}

	// The docs' example overlay: PostgreSQL behind PgBouncer on 6432, in
	// one CIDR.
	dir := t.TempDir()
	abs, err := filepath.Abs("default")
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	overlay := `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ` + base + `
patches:
- target:
    kind: NetworkPolicy
    name: idempotency-operator-manager-egress
  patch: |-
    - op: replace
      path: /spec/egress/2/ports/0/port
      value: 6432
    - op: add
      path: /spec/egress/2/to
      value:
      - ipBlock:
          cidr: 10.20.0.0/16
`
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	p := managerEgress(t, build(t, dir))
	got := egressPorts(p)
	if fmt.Sprint(got[2]) != "[6432/TCP]" || len(p.Spec.Egress[2].To) != 1 || p.Spec.Egress[2].To[0].IPBlock.CIDR != "10.20.0.0/16" {
		t.Errorf("the patched PostgreSQL rule: %v to %v", got[2], p.Spec.Egress[2].To)
	}
	if fmt.Sprint(got[3]) != fmt.Sprint(want[3]) {
		t.Errorf("the patch changed the Kafka rule: %v", got[3])
	}
}
