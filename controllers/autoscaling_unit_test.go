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
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/controllers/objects"
)

func autoscaledConsumer(mods ...func(*kafkav1alpha1.IdempotentConsumer)) *kafkav1alpha1.IdempotentConsumer {
	obj := newConsumer("ns", "orders", withAutoscaling(2, 12))
	obj.UID = "uid-1"
	for _, m := range mods {
		m(obj)
	}
	return obj
}

func TestBuildScaledObject(t *testing.T) {
	obj := autoscaledConsumer(func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Autoscaling.LagThreshold = ptr64(250)
		o.Spec.Autoscaling.PollingInterval = ptr32(15)
	})
	a, b := objects.ScaledObject(obj, 6), objects.ScaledObject(obj.DeepCopy(), 6)
	if !equality.Semantic.DeepEqual(a, b) {
		t.Fatal("objects.ScaledObject is not a pure function")
	}
	if a.GroupVersionKind() != objects.ScaledObjectGVK || a.GetName() != "orders-consumer" || a.GetNamespace() != "ns" {
		t.Errorf("identity %s %s/%s", a.GroupVersionKind(), a.GetNamespace(), a.GetName())
	}
	owner := metav1.GetControllerOf(a)
	if owner == nil || owner.UID != "uid-1" || owner.Kind != "IdempotentConsumer" {
		t.Errorf("controller reference %+v", owner)
	}
	for path, want := range map[string]any{
		"spec.scaleTargetRef.apiVersion": "apps/v1",
		"spec.scaleTargetRef.kind":       "Deployment",
		"spec.scaleTargetRef.name":       "orders-consumer",
		"spec.minReplicaCount":           int64(2),
		"spec.maxReplicaCount":           int64(6),
		"spec.pollingInterval":           int64(15),
	} {
		if v, _, _ := unstructured.NestedFieldNoCopy(a.Object, strings.Split(path, ".")...); v != want {
			t.Errorf("%s = %v, want %v", path, v, want)
		}
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(a.Object, "spec", "cooldownPeriod"); found {
		t.Error("cooldownPeriod set although the spec leaves it to KEDA")
	}
	md := triggerMetadata(t, a)
	want := map[string]string{
		"bootstrapServers": "kafka-0.kafka:9092", "consumerGroup": "orders-writer", "topic": "orders",
		"lagThreshold": "250", "offsetResetPolicy": "earliest",
	}
	if !equality.Semantic.DeepEqual(md, want) {
		t.Errorf("trigger metadata = %v, want %v", md, want)
	}
	if objects.TriggerAuthentication(obj) != nil {
		t.Error("a TriggerAuthentication for plaintext brokers")
	}
	// Only JSON value types (DeepCopyJSON panics on others), or the content
	// is not what the API server stores.
	_ = runtime.DeepCopyJSON(a.Object)
}

func TestScaledObjectBounds(t *testing.T) {
	for _, tc := range []struct {
		min, max, partitions int32
		wantMin, wantMax     int32
	}{
		{1, 10, 0, 1, 10}, // partitions unknown: no cap
		{1, 10, 3, 1, 3},  // capped
		{1, 2, 8, 1, 2},   // below the partitions
		{4, 10, 3, 4, 4},  // min above the partitions: never below min
		{0, 5, 12, 0, 5},  // scale to zero
	} {
		obj := newConsumer("ns", "a", withAutoscaling(tc.min, tc.max))
		if lo, hi := objects.ScaledObjectBounds(obj, tc.partitions); lo != tc.wantMin || hi != tc.wantMax {
			t.Errorf("min %d max %d partitions %d: got [%d, %d], want [%d, %d]", tc.min, tc.max, tc.partitions, lo, hi, tc.wantMin, tc.wantMax)
		}
	}
}

func TestBuildScaledObjectTLSAndSASL(t *testing.T) {
	obj := autoscaledConsumer(func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.TLS = &kafkav1alpha1.KafkaTLS{
			CASecretRef:         &kafkav1alpha1.SecretKeyRef{Name: "kafka-ca", Key: "ca.crt"},
			ClientCertSecretRef: &kafkav1alpha1.SecretKeyRef{Name: "kafka-client", Key: "tls.crt"},
			ClientKeySecretRef:  &kafkav1alpha1.SecretKeyRef{Name: "kafka-client", Key: "tls.key"},
			InsecureSkipVerify:  true,
		}
		o.Spec.Kafka.SASL = &kafkav1alpha1.KafkaSASL{
			Mechanism:         kafkav1alpha1.SASLScramSHA256,
			UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: "kafka-user", Key: "username"},
			PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: "kafka-user", Key: "password"},
		}
		o.Spec.Consumer.Env = []corev1.EnvVar{{Name: "CONSUMER_START_OFFSET", Value: "latest"}}
	})
	so := objects.ScaledObject(obj, 0)
	md := triggerMetadata(t, so)
	for k, v := range map[string]string{"tls": "enable", "unsafeSsl": "true", "sasl": "scram_sha256", "offsetResetPolicy": "latest"} {
		if md[k] != v {
			t.Errorf("trigger metadata %s = %q, want %q", k, md[k], v)
		}
	}
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if ref, _, _ := unstructured.NestedString(triggers[0].(map[string]any), "authenticationRef", "name"); ref != "orders-consumer" {
		t.Errorf("authenticationRef = %q", ref)
	}
	ta := objects.TriggerAuthentication(obj)
	if ta == nil || ta.GroupVersionKind() != objects.TriggerAuthenticationGVK || metav1.GetControllerOf(ta) == nil {
		t.Fatalf("TriggerAuthentication = %v", ta)
	}
	_ = runtime.DeepCopyJSON(so.Object)
	_ = runtime.DeepCopyJSON(ta.Object)
	refs, _, _ := unstructured.NestedSlice(ta.Object, "spec", "secretTargetRef")
	got := map[string]string{}
	for _, r := range refs {
		m := r.(map[string]any)
		got[m["parameter"].(string)] = m["name"].(string) + "/" + m["key"].(string)
	}
	want := map[string]string{
		"ca": "kafka-ca/ca.crt", "cert": "kafka-client/tls.crt", "key": "kafka-client/tls.key",
		"username": "kafka-user/username", "password": "kafka-user/password",
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("secretTargetRef = %v, want %v", got, want)
	}
	// A change to the credentials' references changes the hash that decides
	// whether to apply again.
	other := obj.DeepCopy()
	other.Spec.Kafka.SASL.PasswordSecretRef.Key = "pw"
	if objects.ScaledObject(other, 0).GetAnnotations()[objects.AnnotationSpecHash] == so.GetAnnotations()[objects.AnnotationSpecHash] {
		t.Error("the spec hash ignores the TriggerAuthentication")
	}
}

func triggerMetadata(t *testing.T, so *unstructured.Unstructured) map[string]string {
	t.Helper()
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if len(triggers) != 1 || triggers[0].(map[string]any)["type"] != "kafka" {
		t.Fatalf("triggers = %v", triggers)
	}
	md, _, err := unstructured.NestedStringMap(triggers[0].(map[string]any), "metadata")
	if err != nil {
		t.Fatal(err)
	}
	return md
}

func TestBuildDeploymentAutoscaledLeavesReplicas(t *testing.T) {
	obj := autoscaledConsumer()
	dep := objects.Deployment(obj, objects.Options{Autoscaled: true})
	if dep.Spec.Replicas != nil {
		t.Errorf("replicas = %d, want unset under KEDA", *dep.Spec.Replicas)
	}
	raw, _ := json.Marshal(dep.Spec)
	if strings.Contains(string(raw), `"replicas"`) {
		t.Errorf("the applied spec carries replicas: %s", raw)
	}
	if plain := objects.Deployment(obj, objects.Options{}); plain.Spec.Replicas == nil || *plain.Spec.Replicas != 1 ||
		plain.Annotations[objects.AnnotationSpecHash] == dep.Annotations[objects.AnnotationSpecHash] {
		t.Error("without KEDA the Deployment must carry spec.consumer.replicas and another hash")
	}
}

// TestKStatusOfEachOutcome computes kstatus for each way summarize can end,
// without an API server: the table is the contract documented in
// docs/operator.md.
func TestKStatusOfEachOutcome(t *testing.T) {
	r := &IdempotentConsumerReconciler{}
	for _, tc := range []struct {
		name  string
		state func(*reconcileState)
		want  status.Status
	}{
		{"ready", func(s *reconcileState) { s.databaseOK, s.partitionsOK, s.consumerOK = true, true, true }, status.CurrentStatus},
		{"ready with warnings", func(s *reconcileState) {
			s.databaseOK, s.partitionsOK, s.consumerOK = true, true, true
			s.obj.SetCondition(kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionFalse, kafkav1alpha1.ReasonRetentionShorterThanTopic, "short")
			s.obj.SetCondition(kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKEDANotInstalled, "no KEDA")
		}, status.CurrentStatus},
		{"rolling out", func(s *reconcileState) {
			s.databaseOK, s.partitionsOK = true, true
			s.wait(kafkav1alpha1.ReasonDeploymentProgressing, "rolling")
		}, status.InProgressStatus},
		{"retrying", func(s *reconcileState) { s.retry(kafkav1alpha1.ReasonDatabaseUnreachable, "down") }, status.InProgressStatus},
		{"stalled", func(s *reconcileState) { s.stall(kafkav1alpha1.ReasonTableNotOwned, "not ours") }, status.FailedStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := newConsumer("ns", "a")
			obj.Generation = 3
			s := &reconcileState{obj: obj}
			tc.state(s)
			r.summarize(s)
			if got := kstatusOfTyped(t, obj); got != tc.want {
				t.Errorf("kstatus = %s, want %s (%s)", got, tc.want, conditionsSummary(obj))
			}
			health, msg := argoHealth(t, unstructuredOf(t, obj))
			if health != argoFor[tc.want] {
				t.Errorf("Argo CD health %s (%s), want %s", health, msg, argoFor[tc.want])
			}
			if tc.name == "ready with warnings" && !strings.Contains(msg, "TopicRetentionCovered False (DedupRetentionShorterThanTopic)") {
				t.Errorf("Argo CD message %q does not list the warnings", msg)
			}
			// The same status one generation behind is never Current.
			obj.Generation = 4
			if got := kstatusOfTyped(t, obj); got != status.InProgressStatus {
				t.Errorf("with an unobserved generation kstatus = %s, want InProgress", got)
			}
			if health, _ := argoHealth(t, unstructuredOf(t, obj)); health != "Progressing" {
				t.Errorf("with an unobserved generation Argo CD health = %s, want Progressing", health)
			}
		})
	}
	t.Run("suspended", func(t *testing.T) {
		obj := newConsumer("ns", "a")
		obj.Generation = 2
		r.markSuspended(&reconcileState{obj: obj})
		// Ready=False without Reconciling or Stalled: kstatus falls back to
		// the Ready condition and reports InProgress.
		if got := kstatusOfTyped(t, obj); got != status.InProgressStatus {
			t.Errorf("suspended: kstatus = %s", got)
		}
		if health, _ := argoHealth(t, unstructuredOf(t, obj)); health != "Suspended" {
			t.Errorf("suspended: Argo CD health = %s", health)
		}
	})
	t.Run("no status yet", func(t *testing.T) {
		obj := newConsumer("ns", "a")
		obj.Generation = 1
		if health, _ := argoHealth(t, unstructuredOf(t, obj)); health != "Progressing" {
			t.Errorf("before the first reconcile Argo CD health = %s, want Progressing", health)
		}
	})
}

func unstructuredOf(t *testing.T, obj *kafkav1alpha1.IdempotentConsumer) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func kstatusOfTyped(t *testing.T, obj *kafkav1alpha1.IdempotentConsumer) status.Status {
	t.Helper()
	u := &unstructured.Unstructured{Object: unstructuredOf(t, obj)}
	u.SetGroupVersionKind(kafkav1alpha1.GroupVersion.WithKind("IdempotentConsumer"))
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

func ptr64(v int64) *int64 { return &v }
