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

// Package config_test renders the kustomizations in config/ with the
// kustomize API pinned in go.mod (what `kustomize build` and `kubectl apply
// -k` run) and checks that the output is valid, strictly decodable
// Kubernetes YAML that installs a working, least-privilege operator.
package config_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

const (
	namespace = "idempotency-system"
	prefix    = "idempotency-operator-"
)

var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, kafkav1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	// Strict: an unknown or duplicated field is an error, not silently dropped.
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// build renders a kustomization directory and splits it into documents.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("kustomize build %s: output is not valid YAML: %v", dir, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			t.Errorf("%s: a document lacks apiVersion, kind or name: %v", dir, u.Object)
		}
		objs = append(objs, u)
	}
	if len(objs) == 0 {
		t.Fatalf("kustomize build %s produced nothing", dir)
	}
	return objs
}

// typed strictly decodes u into a typed object of the scheme.
func typed[T runtime.Object](t *testing.T, u *unstructured.Unstructured, into T) T {
	t.Helper()
	b, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := decoder.Decode(b, nil, into); err != nil {
		t.Fatalf("%s %s does not decode strictly: %v", u.GetKind(), u.GetName(), err)
	}
	return into
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func TestDefaultOverlay(t *testing.T) {
	objs := build(t, "default")
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		switch o.GetKind() {
		case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace":
			if o.GetNamespace() != "" {
				t.Errorf("cluster-scoped %s %s has namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
			}
		default:
			if o.GetNamespace() != namespace {
				t.Errorf("%s %s is in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
			}
		}
		if o.GetKind() != "CustomResourceDefinition" && o.GetKind() != "Namespace" && !strings.HasPrefix(o.GetName(), prefix) {
			t.Errorf("%s %s lacks the name prefix %q", o.GetKind(), o.GetName(), prefix)
		}
		// Every document decodes strictly into its API type.
		if o.GetKind() != "ServiceMonitor" {
			obj, _, err := decoder.Decode(mustJSON(t, o), nil, nil)
			if err != nil {
				t.Errorf("%s %s does not decode strictly: %v", o.GetKind(), o.GetName(), err)
			} else if obj == nil {
				t.Errorf("%s %s decoded to nothing", o.GetKind(), o.GetName())
			}
		}
	}
	// No CRD and no IdempotentConsumer: deleting the operator's kustomization
	// (kubectl delete -k config/default) must leave the CRD, and with it every
	// IdempotentConsumer and consumer Deployment, in place.
	for kind, n := range map[string]int{"CustomResourceDefinition": 0, "IdempotentConsumer": 0, "Namespace": 1, "Deployment": 1, "ServiceAccount": 1, "Service": 1, "Role": 2, "RoleBinding": 2} {
		if kinds[kind] != n {
			t.Errorf("%d %s objects, want %d", kinds[kind], kind, n)
		}
	}
	if find(objs, "Namespace", namespace) == nil {
		t.Errorf("no Namespace %s", namespace)
	}

	crd := typed(t, find(build(t, "crd"), "CustomResourceDefinition", "idempotentconsumers.kafka.idempotency.dev"), &apiextensionsv1.CustomResourceDefinition{})
	if v := crd.Spec.Versions; len(v) != 1 || v[0].Name != "v1alpha1" || v[0].Subresources == nil || v[0].Subresources.Status == nil || v[0].Subresources.Scale == nil {
		t.Errorf("CRD versions/subresources: %+v", v)
	}

	dep := typed(t, find(objs, "Deployment", prefix+"controller-manager"), &appsv1.Deployment{})
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != prefix+"controller-manager" || find(objs, "ServiceAccount", pod.ServiceAccountName) == nil {
		t.Errorf("manager runs as ServiceAccount %q, which the overlay does not create", pod.ServiceAccountName)
	}
	// The committed tree names the unreleased build; the installer sets real
	// tags (hack/kustomize's tests check those).
	if img := pod.Containers[0].Image; img != "ghcr.io/idempotency-dev/operator:dev" {
		t.Errorf("manager image %q", img)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("manager pod securityContext is not restricted: %+v", psc)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("manager container %s securityContext is not restricted: %+v", c.Name, sc)
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Errorf("manager container %s lacks probes", c.Name)
		}
		if !slices.Contains(c.Args, "--leader-elect") || !slices.Contains(c.Args, "--metrics-bind-address=:8443") {
			t.Errorf("manager args %v lack leader election or the secure metrics port", c.Args)
		}
	}

	svc := typed(t, find(objs, "Service", prefix+"controller-manager-metrics-service"), &corev1.Service{})
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("metrics Service selector %v does not match the manager pods %v", svc.Spec.Selector, dep.Spec.Template.Labels)
	}

	// Bindings point at roles and the ServiceAccount that exist.
	for _, o := range objs {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		switch o.GetKind() {
		case "ClusterRoleBinding":
			b := typed(t, o, &rbacv1.ClusterRoleBinding{})
			ref, subjects = b.RoleRef, b.Subjects
		case "RoleBinding":
			b := typed(t, o, &rbacv1.RoleBinding{})
			ref, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		if find(objs, ref.Kind, ref.Name) == nil {
			t.Errorf("%s %s binds %s %s, which the overlay does not create", o.GetKind(), o.GetName(), ref.Kind, ref.Name)
		}
		for _, s := range subjects {
			if s.Kind != "ServiceAccount" || s.Name != pod.ServiceAccountName || s.Namespace != namespace {
				t.Errorf("%s %s subject %+v is not the manager's ServiceAccount", o.GetKind(), o.GetName(), s)
			}
		}
	}

	// Least privilege: the manager reads Secrets and writes only the
	// application Secrets "<name>-app" it creates (create and update, never
	// delete or patch: a Secret of that name it does not control is left
	// alone, controllers/appsecret.go), and touches nothing outside its own
	// API, Deployments, Events and the KEDA objects of spec.autoscaling (no
	// list or watch: it reads them by name), plus pods/create for the
	// server-side dry run of controllers/podsecurity.go.
	// In its own namespace, beyond the Lease: get of the config-hash key
	// Secret by name, and create (which no name can limit), nothing else.
	keyRole := typed(t, find(objs, "Role", prefix+"config-hash-key-role"), &rbacv1.Role{})
	wantKeyRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"idempotency-operator-config-hash-key"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(keyRole.Rules, wantKeyRules) {
		t.Errorf("config-hash-key-role rules %+v, want %+v", keyRole.Rules, wantKeyRules)
	}
	role := typed(t, find(objs, "ClusterRole", prefix+"manager-role"), &rbacv1.ClusterRole{})
	allowed := map[string][]string{
		"/secrets":             {"create", "get", "list", "update", "watch"},
		"/pods":                {"create", "get", "list"}, // create: Pod Security dry runs; get, list: a replay Job's termination message
		"batch/jobs":           {"create", "get", "list", "watch"},
		"apps/deployments":     {"create", "delete", "get", "list", "patch", "update", "watch"},
		"events.k8s.io/events": {"create", "patch"},
		"kafka.idempotency.dev/idempotentconsumers":            {"get", "list", "patch", "update", "watch"},
		"kafka.idempotency.dev/idempotentconsumers/status":     {"get", "patch", "update"},
		"kafka.idempotency.dev/idempotentconsumers/finalizers": {"update"},
		"kafka.idempotency.dev/deadletterreplays":              {"get", "list", "watch"},
		"kafka.idempotency.dev/deadletterreplays/status":       {"get", "patch", "update"},
		"kafka.idempotency.dev/outboxes":                       {"get", "list", "watch"},
		"kafka.idempotency.dev/outboxes/status":                {"get", "patch", "update"},
		"kafka.idempotency.dev/outboxes/finalizers":            {"update"}, // owner references with blockOwnerDeletion on the relay Deployment
		"keda.sh/scaledobjects":                                {"create", "delete", "get", "patch"},
		"keda.sh/triggerauthentications":                       {"create", "delete", "get", "patch"},
		// docs/platforms.md: read by name, never listed or watched.
		"postgresql.cnpg.io/clusters":  {"get"},
		"postgresql.cnpg.io/poolers":   {"get"},
		"kafka.strimzi.io/kafkas":      {"get"},
		"kafka.strimzi.io/kafkausers":  {"create", "delete", "get", "patch", "update"},
		"kafka.strimzi.io/kafkatopics": {"create", "delete", "get", "patch", "update"},
	}
	for _, rule := range role.Rules {
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				want, ok := allowed[g+"/"+r]
				if !ok {
					t.Errorf("manager-role grants %v on %s/%s", rule.Verbs, g, r)
					continue
				}
				for _, v := range rule.Verbs {
					if !slices.Contains(want, v) {
						t.Errorf("manager-role grants %s on %s/%s", v, g, r)
					}
				}
			}
		}
	}
}

// TestMonitoringSelectsTheMetricsService checks that config/monitoring's
// ServiceMonitor scrapes the metrics Service config/default installs.
func TestMonitoringSelectsTheMetricsService(t *testing.T) {
	sm := find(build(t, "monitoring"), "ServiceMonitor", prefix+"controller-manager-metrics-monitor")
	if sm == nil {
		t.Fatal("config/monitoring renders no ServiceMonitor " + prefix + "controller-manager-metrics-monitor")
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["scheme"] != "https" || eps[0].(map[string]any)["port"] != "https" {
		t.Errorf("ServiceMonitor endpoints %v: want one https endpoint on port https", eps)
	}
	svc := find(build(t, "default"), "Service", prefix+"controller-manager-metrics-service")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if svc == nil || len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(svc.GetLabels())) {
		t.Errorf("ServiceMonitor selector %v does not select the metrics Service", sel)
	}
	if svc != nil && sm.GetNamespace() != svc.GetNamespace() {
		t.Errorf("ServiceMonitor in %q, metrics Service in %q: a ServiceMonitor without a namespaceSelector looks in its own namespace only", sm.GetNamespace(), svc.GetNamespace())
	}
}

func TestSamples(t *testing.T) {
	objs := build(t, "samples")
	names := map[string]*kafkav1alpha1.IdempotentConsumer{}
	var replays []*kafkav1alpha1.DeadLetterReplay
	for _, o := range objs {
		if o.GetKind() == "DeadLetterReplay" {
			replays = append(replays, typed(t, o, &kafkav1alpha1.DeadLetterReplay{}))
			continue
		}
		if o.GetKind() == "Outbox" {
			ob := typed(t, o, &kafkav1alpha1.Outbox{})
			if len(ob.Spec.Kafka.Topics) == 0 {
				t.Errorf("Outbox sample %s names no topic", ob.Name)
			}
			continue
		}
		ic := typed(t, o, &kafkav1alpha1.IdempotentConsumer{})
		names[ic.Name] = ic
	}
	// The replay sample is a dry run of a sample consumer's dead letters.
	if len(replays) != 1 || names[replays[0].Spec.ConsumerRef.Name] == nil || replays[0].Spec.Mode != kafkav1alpha1.ReplayDryRun {
		t.Errorf("want one DeadLetterReplay sample, a DryRun naming a sample consumer; got %d: %+v", len(replays), replays)
	}
	billing, ledger := names["billing"], names["ledger"]
	if billing == nil || ledger == nil {
		t.Fatalf("want the billing and ledger samples, got %v", names)
	}
	if billing.Spec.Consumer.Sink.Type != kafkav1alpha1.SinkHTTP || billing.Spec.Consumer.Sink.HTTP == nil {
		t.Error("billing sample does not use the HTTP sink")
	}
	if ledger.Spec.Consumer.Sink.Type != kafkav1alpha1.SinkSQL || ledger.Spec.Consumer.Sink.SQL == nil {
		t.Error("ledger sample does not use the SQL sink")
	}
}

func mustJSON(t *testing.T, u *unstructured.Unstructured) []byte {
	t.Helper()
	b, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
