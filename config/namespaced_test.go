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
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// TestNamespacedOverlay checks that the flag and the RBAC of
// config/namespaced agree: the manager's rules are bound in exactly the
// namespaces it watches, and nowhere cluster-wide. (controllers'
// TestNamespacedInstall runs the manager under this RBAC.)
func TestNamespacedOverlay(t *testing.T) {
	objs := build(t, "namespaced")
	dep := typed(t, find(objs, "Deployment", prefix+"controller-manager"), &appsv1.Deployment{})
	var watched []string
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--watch-namespaces="); ok {
			watched = strings.Split(v, ",")
		}
	}
	if len(watched) == 0 {
		t.Fatalf("the manager has no --watch-namespaces: %q", dep.Spec.Template.Spec.Containers[0].Args)
	}

	var bound []string
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRoleBinding":
			b := typed(t, o, &rbacv1.ClusterRoleBinding{})
			if b.RoleRef.Name == prefix+"manager-role" {
				t.Errorf("ClusterRoleBinding %s grants the manager's rules cluster-wide", b.Name)
			}
		case "RoleBinding":
			b := typed(t, o, &rbacv1.RoleBinding{})
			if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != prefix+"manager-role" {
				continue
			}
			bound = append(bound, b.Namespace)
			for _, s := range b.Subjects {
				if s.Kind != "ServiceAccount" || s.Name != dep.Spec.Template.Spec.ServiceAccountName || s.Namespace != dep.Namespace {
					t.Errorf("RoleBinding %s/%s subject %+v is not the manager's ServiceAccount", b.Namespace, b.Name, s)
				}
			}
		}
	}
	// The platform kinds (docs/platforms.md) are in the rules it binds:
	// read CloudNativePG and Kafka, write KafkaUsers and KafkaTopics.
	role := typed(t, find(objs, "ClusterRole", prefix+"manager-role"), &rbacv1.ClusterRole{})
	for _, want := range []struct{ group, resource, verb string }{
		{"postgresql.cnpg.io", "clusters", "get"}, {"postgresql.cnpg.io", "poolers", "get"},
		{"kafka.strimzi.io", "kafkas", "get"}, {"kafka.strimzi.io", "kafkausers", "create"},
		{"kafka.strimzi.io", "kafkatopics", "update"},
	} {
		var ok bool
		for _, r := range role.Rules {
			ok = ok || slices.Contains(r.APIGroups, want.group) && slices.Contains(r.Resources, want.resource) && slices.Contains(r.Verbs, want.verb)
		}
		if !ok {
			t.Errorf("manager-role cannot %s %s.%s", want.verb, want.resource, want.group)
		}
	}
	slices.Sort(watched)
	slices.Sort(bound)
	if !slices.Equal(watched, bound) {
		t.Errorf("--watch-namespaces %q, but manager-role is bound in %q: they must list the same namespaces", watched, bound)
	}
}

// TestNetworkPolicies renders the optional policies: the metrics one admits
// only the metrics port from namespaces labelled metrics=enabled, and the
// consumer egress template selects the pods the operator labels.
func TestNetworkPolicies(t *testing.T) {
	metrics := typed(t, find(build(t, "network-policy"), "NetworkPolicy", "allow-metrics-traffic"), &networkingv1.NetworkPolicy{})
	if len(metrics.Spec.Ingress) != 1 || len(metrics.Spec.Ingress[0].Ports) != 1 || metrics.Spec.Ingress[0].Ports[0].Port.IntValue() != 8443 ||
		metrics.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["metrics"] != "enabled" {
		t.Errorf("allow-metrics-traffic: %+v", metrics.Spec.Ingress)
	}
	egress := typed(t, find(build(t, "network-policy/consumer-egress"), "NetworkPolicy", "idempotent-consumer-egress"), &networkingv1.NetworkPolicy{})
	want := objects.SelectorLabels(&kafkav1alpha1.IdempotentConsumer{})[objects.LabelName]
	if egress.Spec.PodSelector.MatchLabels[objects.LabelName] != want ||
		!slices.Equal(egress.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("idempotent-consumer-egress: selector %v, policy types %v", egress.Spec.PodSelector.MatchLabels, egress.Spec.PolicyTypes)
	}
}
