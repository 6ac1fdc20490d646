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
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// scope says, per kind any kustomization here renders, whether its objects
// are namespaced. A kind missing here fails the test, so that a new kind is
// classified rather than guessed.
var scope = map[string]bool{
	"CustomResourceDefinition":         false,
	"ValidatingAdmissionPolicy":        false,
	"ValidatingAdmissionPolicyBinding": false,
	"ClusterRole":                      false,
	"ClusterRoleBinding":               false,
	"Namespace":                        false,
	"Deployment":                       true,
	"Service":                          true,
	"ServiceAccount":                   true,
	"Role":                             true,
	"RoleBinding":                      true,
	"ConfigMap":                        true,
	"ServiceMonitor":                   true,
	"PodMonitor":                       true,
	"PrometheusRule":                   true,
	"IdempotentConsumer":               true,
	"DeadLetterReplay":                 true,
	"Outbox":                           true,
	"NetworkPolicy":                    true,
}

// teamNamespaces are namespaces an overlay binds into that belong to the
// teams whose objects it serves, not to the install: config/namespaced names
// team-a as the example of a watched namespace, and the consumer egress
// template as the example of a consumer's namespace; they exist before the
// operator does.
var teamNamespaces = map[string][]string{
	"namespaced":                     {"team-a"},
	"network-policy/consumer-egress": {"team-a"},
}

// perNamespace are kustomizations applied into a team's namespace (the one
// kubectl points at), like the samples: their objects carry no namespace.
var perNamespace = map[string]bool{
	"samples": true,
}

// TestEveryKustomization builds every kustomization under config/ (what
// `kubectl apply -k` would do with each) and checks that its namespaced
// objects, and the ServiceAccounts its bindings name, live in a namespace
// the install creates: one this kustomization renders itself or the one
// config/default (the operator) renders. The samples are the exception by
// design: they carry no namespace, so they land in the one kubectl is
// pointed at.
func TestEveryKustomization(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (d.Name() == "kustomization.yaml" || d.Name() == "kustomization.yml" || d.Name() == "Kustomization") {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every kustomization the docs and the Makefile name, at least.
	for _, want := range []string{"crd", "default", "manager", "rbac", "monitoring", "samples"} {
		if !slices.Contains(dirs, want) {
			t.Errorf("no kustomization in config/%s (found %v)", want, dirs)
		}
	}

	installed := namespacesCreated(build(t, "default"))
	if len(installed) == 0 {
		t.Fatal("config/default creates no Namespace")
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			objs := build(t, dir)
			exists := namespacesCreated(objs)
			for ns := range installed {
				exists[ns] = true
			}
			for _, ns := range teamNamespaces[dir] {
				exists[ns] = true
			}
			for _, o := range objs {
				namespaced, known := scope[o.GetKind()]
				switch {
				case !known:
					t.Errorf("%s %s: kind %s is not in this test's scope table; add it", dir, o.GetName(), o.GetKind())
				case !namespaced && o.GetNamespace() != "":
					t.Errorf("cluster-scoped %s %s has namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
				case namespaced && o.GetNamespace() == "" && !perNamespace[dir]:
					t.Errorf("%s %s has no namespace: it would land wherever kubectl points", o.GetKind(), o.GetName())
				case namespaced && o.GetNamespace() != "" && !exists[o.GetNamespace()]:
					t.Errorf("%s %s is in namespace %q, which neither it nor config/default creates (they create %v)",
						o.GetKind(), o.GetName(), o.GetNamespace(), keys(exists))
				}
				if o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding" {
					subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
					for _, s := range subjects {
						s := s.(map[string]any)
						if ns, _ := s["namespace"].(string); s["kind"] == "ServiceAccount" && !exists[ns] {
							t.Errorf("%s %s binds ServiceAccount %v in namespace %q, which is not created", o.GetKind(), o.GetName(), s["name"], ns)
						}
					}
				}
			}
		})
	}
}

func namespacesCreated(objs []*unstructured.Unstructured) map[string]bool {
	out := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			out[o.GetName()] = true
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
