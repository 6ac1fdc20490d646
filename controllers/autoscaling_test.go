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
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/controllers/objects"
)

func withAutoscaling(minReplicas, maxReplicas int32) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Autoscaling = &kafkav1alpha1.AutoscalingSpec{Enabled: true, MinReplicas: &minReplicas, MaxReplicas: maxReplicas}
	}
}

func (te *testEnv) deployment(t testing.TB, ns, name string) *appsv1.Deployment {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, dep); err != nil {
		t.Fatal(err)
	}
	return dep
}

func (te *testEnv) scaledObject(t testing.TB, ns, name string) (*unstructured.Unstructured, error) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(objects.ScaledObjectGVK)
	err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u)
	return u, err
}

// kedaCRDs is the stand-in for KEDA's CRDs.
var kedaCRDs = envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "keda")}, ErrorIfPathMissing: true}

// testAutoscaling runs an object with spec.autoscaling first without KEDA
// (the condition says so, everything else works, the scale subresource
// drives the Deployment), then installs KEDA's CRDs into the running API
// server: the ScaledObject is created, owned, capped at the partition count,
// and the Deployment's replica count is left to KEDA. Turning autoscaling off
// removes the ScaledObject and gives the count back to the spec; deleting
// KEDA's CRDs is noticed too.
func testAutoscaling(t *testing.T, te *testEnv) {
	ctx := context.Background()
	k := consumertest.NewKafka(t)
	if err := k.CreateTopic(ctx, "scaled", 3, map[string]string{"retention.ms": retentionMS(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	k.MustCreateTopic(t, "scaled.dlq", 1)
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	const name = "auto"
	depName := name + "-consumer"
	te.create(t, newConsumer(ns, name, withKafka(k.Brokers(), "scaled"), withReplicas(2), withAutoscaling(1, 10)))

	// Without KEDA: Ready all the same, a clear condition, spec replicas.
	te.waitReady(t, ns, name)
	obj := te.waitCondition(t, ns, name, kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKEDANotInstalled)
	if msg := obj.GetCondition(kafkav1alpha1.ConditionAutoscalingReady).Message; !strings.Contains(msg, "install KEDA") {
		t.Errorf("AutoscalingReady message %q does not say what to do", msg)
	}
	if !te.hasEvents(t, ns, name, kafkav1alpha1.ReasonKEDANotInstalled) {
		t.Error("no KEDANotInstalled Event")
	}
	if got := ptr.Deref(te.deployment(t, ns, depName).Spec.Replicas, -1); got != 2 {
		t.Errorf("without KEDA the Deployment runs %d replicas, want spec.consumer.replicas 2", got)
	}
	// kubectl scale (the scale subresource) keeps working without KEDA.
	scale := &autoscalingv1.Scale{}
	if err := te.c.SubResource("scale").Get(ctx, obj, scale); err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 3
	if err := te.c.SubResource("scale").Update(ctx, obj, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Deployment scaled to 3 through the scale subresource", func() (bool, string) {
		return ptr.Deref(te.deployment(t, ns, depName).Spec.Replicas, -1) == 3, ""
	})
	if _, err := te.scaledObject(t, ns, depName); err == nil {
		t.Fatal("a ScaledObject exists although KEDA is not installed")
	}

	// KEDA arrives. A negative answer is believed for TopicRefresh, so move
	// the clock past it, and poke.
	if _, err := envtest.InstallCRDs(te.cfg.Config, kedaCRDs); err != nil {
		t.Fatal(err)
	}
	te.expireTopicCache(t, ns, name)
	obj = te.waitCondition(t, ns, name, kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionTrue, kafkav1alpha1.ReasonScaledObjectApplied)
	if !strings.Contains(obj.GetCondition(kafkav1alpha1.ConditionAutoscalingReady).Message, "capped at the topic's 3 partitions") {
		t.Errorf("AutoscalingReady message %q does not mention the cap", obj.GetCondition(kafkav1alpha1.ConditionAutoscalingReady).Message)
	}
	if obj.Status.ScaledObjectName != depName {
		t.Errorf("status.scaledObjectName = %q", obj.Status.ScaledObjectName)
	}
	so, err := te.scaledObject(t, ns, depName)
	if err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(so, obj) {
		t.Errorf("ScaledObject owner references %+v do not name the object as controller", so.GetOwnerReferences())
	}
	for path, want := range map[string]any{
		"spec.scaleTargetRef.kind": "Deployment",
		"spec.scaleTargetRef.name": depName,
		"spec.minReplicaCount":     int64(1),
		"spec.maxReplicaCount":     int64(3), // 10, capped at the partitions
	} {
		if v, _, _ := unstructured.NestedFieldNoCopy(so.Object, strings.Split(path, ".")...); v != want {
			t.Errorf("ScaledObject %s = %v, want %v", path, v, want)
		}
	}
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if len(triggers) != 1 {
		t.Fatalf("triggers = %v", triggers)
	}
	md, _, _ := unstructured.NestedStringMap(triggers[0].(map[string]any), "metadata")
	if triggers[0].(map[string]any)["type"] != "kafka" || md["topic"] != "scaled" || md["consumerGroup"] != "orders-writer" ||
		md["bootstrapServers"] != strings.Join(k.Brokers(), ",") || md["lagThreshold"] != "1000" {
		t.Errorf("trigger = %v", triggers[0])
	}

	// The hand-over kept the count the consumer had (3), instead of letting
	// it fall back to 1, and the operator no longer owns it.
	dep := te.deployment(t, ns, depName)
	if got := ptr.Deref(dep.Spec.Replicas, -1); got != 3 {
		t.Errorf("after KEDA took over the Deployment runs %d replicas, want the 3 it had", got)
	}
	if ownsReplicas(dep) {
		t.Error("the operator still owns spec.replicas of the Deployment under KEDA")
	}

	// KEDA's HPA scales the Deployment; the operator does not fight it, even
	// when a spec change makes it apply the Deployment again.
	depScale := &autoscalingv1.Scale{}
	if err := te.c.SubResource("scale").Get(ctx, dep, depScale); err != nil {
		t.Fatal(err)
	}
	depScale.Spec.Replicas = 2
	if err := te.c.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(depScale)); err != nil {
		t.Fatal(err)
	}
	if err := te.update(t, ns, name, func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.Batch.MaxMessages = 50 }); err != nil {
		t.Fatal(err)
	}
	obj = te.waitReady(t, ns, name)
	dep = te.deployment(t, ns, depName)
	if envMap(dep.Spec.Template.Spec.Containers[0].Env)["CONSUMER_BATCH_MAX_MESSAGES"] != "50" {
		t.Error("the spec change did not reach the Deployment")
	}
	if got := ptr.Deref(dep.Spec.Replicas, -1); got != 2 {
		t.Errorf("the operator changed KEDA's replica count 2 to %d", got)
	}
	if obj.Status.Replicas != 2 {
		t.Errorf("status.replicas = %d, want KEDA's 2", obj.Status.Replicas)
	}

	// KEDA says the ScaledObject is not ready: so does AutoscalingReady.
	so, err = te.scaledObject(t, ns, depName)
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(so.Object, []any{map[string]any{
		"type": "Ready", "status": "False", "reason": "ScaledObjectCheckFailed", "message": "failed to ensure HPA is correctly created",
	}}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := te.c.Status().Update(ctx, so); err != nil {
		t.Fatal(err)
	}
	te.poke(t, ns, name)
	obj = te.waitCondition(t, ns, name, kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionFalse, kafkav1alpha1.ReasonScaledObjectNotReady)
	if !obj.IsReady() {
		t.Errorf("KEDA's trouble made Ready false: %s", conditionsSummary(obj))
	}

	// Autoscaling off: the ScaledObject goes, the spec's count comes back.
	if err := te.update(t, ns, name, func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Autoscaling.Enabled = false }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "ScaledObject deleted", func() (bool, string) {
		_, err := te.scaledObject(t, ns, depName)
		return apierrors.IsNotFound(err), ""
	})
	obj = te.waitReady(t, ns, name)
	if c := obj.GetCondition(kafkav1alpha1.ConditionAutoscalingReady); c != nil {
		t.Errorf("AutoscalingReady = %+v with autoscaling off, want absent", c)
	}
	eventually(t, 30*time.Second, "Deployment back at spec.consumer.replicas", func() (bool, string) {
		return ptr.Deref(te.deployment(t, ns, depName).Spec.Replicas, -1) == obj.Replicas(), ""
	})

	// On again, then KEDA's CRDs are deleted: the apply finds them gone.
	if err := te.update(t, ns, name, func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Autoscaling.Enabled = true }); err != nil {
		t.Fatal(err)
	}
	te.waitCondition(t, ns, name, kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionTrue, kafkav1alpha1.ReasonScaledObjectApplied)
	if err := envtest.UninstallCRDs(te.cfg.Config, kedaCRDs); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "KEDA's CRDs gone", func() (bool, string) {
		for _, n := range []string{"scaledobjects.keda.sh", "triggerauthentications.keda.sh"} {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			if err := te.c.Get(ctx, types.NamespacedName{Name: n}, crd); !apierrors.IsNotFound(err) {
				return false, n + ": " + errString(err)
			}
		}
		return true, ""
	})
	if err := te.update(t, ns, name, func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.Batch.MaxMessages = 60 }); err != nil {
		t.Fatal(err)
	}
	te.waitCondition(t, ns, name, kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKEDANotInstalled)
	te.waitReady(t, ns, name)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
