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

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// kstatusOf reads the object from the API server as unstructured (as Flux,
// kubectl wait and cli-utils see it) and computes kstatus's verdict.
func (te *testEnv) kstatusOf(t testing.TB, ns, name string) (*status.Result, *unstructured.Unstructured) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kafkav1alpha1.GroupVersion.WithKind("IdempotentConsumer"))
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatalf("kstatus.Compute: %v", err)
	}
	return res, u
}

// waitKStatus waits until kstatus says want for the object, and returns the
// result and the object it was computed from.
func (te *testEnv) waitKStatus(t testing.TB, ns, name string, want status.Status) (*status.Result, *unstructured.Unstructured) {
	t.Helper()
	var (
		res *status.Result
		u   *unstructured.Unstructured
	)
	eventually(t, 30*time.Second, fmt.Sprintf("kstatus %s for %s/%s", want, ns, name), func() (bool, string) {
		res, u = te.kstatusOf(t, ns, name)
		return res.Status == want, fmt.Sprintf("kstatus %s: %s", res.Status, res.Message)
	})
	if health, msg := argoHealth(t, u.Object); health != argoFor[want] {
		t.Errorf("kstatus %s but the Argo CD health check says %s: %s", want, health, msg)
	}
	return res, u
}

// argoHealthScript is the Argo CD health check of docs/gitops.md, read from
// the document so the published snippet is the tested one.
var argoHealthScript = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "gitops.md"))
	if err != nil {
		return "", err
	}
	const key = "resource.customizations.health.kafka.idempotency.dev_IdempotentConsumer: |"
	_, rest, ok := strings.Cut(string(b), key+"\n")
	if !ok {
		return "", fmt.Errorf("docs/gitops.md has no %q", key)
	}
	var script []string
	for _, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "```") {
			break
		}
		script = append(script, strings.TrimPrefix(line, "    "))
	}
	return strings.Join(script, "\n"), nil
})

// argoHealth runs the Argo CD health check on an object as Argo CD does:
// gopher-lua, the object as the global table obj, the returned table's
// status and message.
func argoHealth(t testing.TB, obj map[string]any) (string, string) {
	t.Helper()
	script, err := argoHealthScript()
	if err != nil {
		t.Fatal(err)
	}
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		t.Fatalf("the Argo CD health check failed: %v", err)
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("the Argo CD health check returned %v", L.Get(-1))
	}
	return lua.LVAsString(hs.RawGetString("status")), lua.LVAsString(hs.RawGetString("message"))
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	}
	panic(fmt.Sprintf("toLua: %T", v))
}

// argoFor is the Argo CD health each kstatus verdict must come with.
var argoFor = map[status.Status]string{
	status.CurrentStatus:    "Healthy",
	status.InProgressStatus: "Progressing",
	status.FailedStatus:     "Degraded",
}

func observedGenerationMatches(u *unstructured.Unstructured) bool {
	og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return found && og == u.GetGeneration()
}

// testKStatus drives one object through failed, reconciling and ready and
// checks what cli-utils' kstatus (the library Flux and kubectl wait build on)
// makes of it at each step.
func testKStatus(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	const name = "ks"

	// Failed: the database Secret is missing, which no retry can fix, so the
	// object is Stalled.
	te.create(t, newConsumer(ns, name))
	res, u := te.waitKStatus(t, ns, name, status.FailedStatus)
	if !observedGenerationMatches(u) {
		t.Errorf("Failed before the generation was observed: %v", u.Object["status"])
	}
	if !strings.Contains(res.Message, "Secret") {
		t.Errorf("kstatus message %q does not say what failed", res.Message)
	}

	// InProgress: the table is made but the consumer Deployment does not
	// become available (the stand-in Deployment controller is paused).
	te.deploymentsAvailable.Store(false)
	defer te.deploymentsAvailable.Store(true)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	te.waitKStatus(t, ns, name, status.InProgressStatus)
	obj := te.waitCondition(t, ns, name, kafkav1alpha1.ConditionReconciling, metav1.ConditionTrue, kafkav1alpha1.ReasonProgressing)
	if c := obj.GetCondition(kafkav1alpha1.ConditionConsumerReady); c == nil || c.Reason != kafkav1alpha1.ReasonDeploymentProgressing {
		t.Errorf("ConsumerReady = %+v, want DeploymentProgressing", c)
	}
	if res, _ := te.kstatusOf(t, ns, name); res.Status != status.InProgressStatus {
		t.Errorf("while the Deployment rolls out kstatus says %s", res.Status)
	}

	// Current: the Deployment becomes available (touch it so the stand-in
	// controller looks at it again).
	te.deploymentsAvailable.Store(true)
	dep := &appsv1.Deployment{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name + "-consumer"}, dep); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(dep.DeepCopy())
	dep.Annotations["test.idempotency.dev/poke"] = randSuffix()
	if err := te.c.Patch(context.Background(), dep, patch); err != nil {
		t.Fatal(err)
	}
	_, u = te.waitKStatus(t, ns, name, status.CurrentStatus)
	if !observedGenerationMatches(u) {
		t.Errorf("Current but observedGeneration %v != generation %d", u.Object["status"], u.GetGeneration())
	}
	if !te.get(t, ns, name).IsReady() {
		t.Error("kstatus Current but Ready is not True for this generation")
	}

	// A spec change: until the operator has observed the new generation
	// kstatus must not say Current; then it is Current again.
	gen := u.GetGeneration()
	if err := te.update(t, ns, name, func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Dedup.Premake = 5 }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the new generation to be Current", func() (bool, string) {
		res, u := te.kstatusOf(t, ns, name)
		if res.Status == status.CurrentStatus && !observedGenerationMatches(u) {
			t.Fatalf("kstatus Current although observedGeneration lags: %v", u.Object["status"])
		}
		return res.Status == status.CurrentStatus && u.GetGeneration() > gen, string(res.Status)
	})

	// Failed again after a change no retry can fix: the Secret loses its key.
	te.setSecret(t, ns, "db", map[string]string{"other": "x"})
	res, _ = te.waitKStatus(t, ns, name, status.FailedStatus)
	if !strings.Contains(res.Message, "no key") {
		t.Errorf("kstatus message %q does not carry the Stalled message", res.Message)
	}
}

// testNoGitOpsDrift applies an object the way a GitOps tool does (server-side
// apply under its own field manager), lets the operator reconcile it in
// several ways, and checks that the operator never wrote into spec: the
// generation stays, the spec is unchanged, no other field manager owns a
// spec field, and applying the same manifest again changes nothing.
func testNoGitOpsDrift(t *testing.T, te *testEnv) {
	ctx := context.Background()
	ns := te.namespace(t)
	const name = "gitops"
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})

	// A manifest as it sits in git: only the fields the user wrote.
	desired := newConsumer(ns, name, withRetention(48*time.Hour), withDeletionPolicy(kafkav1alpha1.DeletionDelete))
	manifest := manifestOf(t, desired)
	apply := func() {
		t.Helper()
		u := manifest.DeepCopy()
		if err := te.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("gitops"), client.ForceOwnership); err != nil {
			t.Fatalf("applying the manifest: %v", err)
		}
	}
	apply()
	ready := te.waitReady(t, ns, name)
	gen, spec := ready.Generation, ready.Spec

	check := func(step string) {
		t.Helper()
		got := te.get(t, ns, name)
		if got.Generation != gen {
			t.Errorf("%s: generation %d -> %d: something wrote into spec", step, gen, got.Generation)
		}
		if !equality.Semantic.DeepEqual(got.Spec, spec) {
			a, _ := json.Marshal(spec)
			b, _ := json.Marshal(got.Spec)
			t.Errorf("%s: spec changed:\n%s\n%s", step, a, b)
		}
		for _, mf := range got.ManagedFields {
			if mf.Manager == "gitops" || mf.Subresource != "" || mf.FieldsV1 == nil {
				continue
			}
			if strings.Contains(mf.FieldsV1.GetRawString(), `"f:spec"`) {
				t.Errorf("%s: field manager %q (%s) owns spec fields: %s", step, mf.Manager, mf.Operation, mf.FieldsV1.GetRawString())
			}
		}
	}
	check("after the first reconcile")

	// Reconciles of every kind: a Secret change, a metadata change, the
	// schedule (a direct call), and the status writes in between.
	te.setSecret(t, ns, "db", map[string]string{"url": dbURL + "&application_name=rotated"})
	te.poke(t, ns, name)
	for range 3 {
		if _, err := te.r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	te.waitReady(t, ns, name)
	check("after more reconciles")

	// Re-applying the manifest from git finds nothing to change: no drift to
	// report, no new generation.
	before := te.get(t, ns, name).ResourceVersion
	apply()
	got := te.get(t, ns, name)
	if got.Generation != gen {
		t.Errorf("re-applying the same manifest bumped the generation %d -> %d", gen, got.Generation)
	}
	if got.ResourceVersion != before {
		t.Errorf("re-applying the same manifest changed the object (resourceVersion %s -> %s)", before, got.ResourceVersion)
	}
	check("after re-applying")
}

// manifestOf is the object as a user writes it: apiVersion, kind, name,
// namespace and the spec fields set, nothing else.
func manifestOf(t testing.TB, obj *kafkav1alpha1.IdempotentConsumer) *unstructured.Unstructured {
	t.Helper()
	b, err := json.Marshal(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": obj.Name, "namespace": obj.Namespace},
		"spec":     spec,
	}}
	u.SetGroupVersionKind(kafkav1alpha1.GroupVersion.WithKind("IdempotentConsumer"))
	return u
}
