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
	"testing"

	"k8s.io/utils/ptr"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// TestStripManagedFields: the cache keeps, of all managedFields, only the
// operator's apply entry on Deployments (what ownsReplicas reads), and the
// replica hand-over still sees it.
func TestStripManagedFields(t *testing.T) {
	replicas := metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{}}}`)
	entries := func() []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{
			{Manager: FieldOwner, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: replicas},
			{Manager: FieldOwner, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{}`)},
			{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{}`)},
			{Manager: handoverFieldOwner, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: replicas},
		}
	}

	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", ManagedFields: entries()}}
	if !ownsReplicas(dep) {
		t.Fatal("the fixture should own spec.replicas before the transform")
	}
	if _, err := stripManagedFields(dep); err != nil {
		t.Fatal(err)
	}
	if len(dep.ManagedFields) != 1 || dep.ManagedFields[0].Manager != FieldOwner || dep.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Errorf("Deployment keeps %+v, want only the operator's apply entry", dep.ManagedFields)
	}
	if !ownsReplicas(dep) {
		t.Error("ownsReplicas is false after the transform")
	}

	// The pod spec goes, the template's metadata and the rest stay; an
	// apply entry that does not own the replicas still does not.
	full := metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:x":{}}},"f:spec":{"f:template":{"f:spec":{"f:containers":{}}}}}`)
	dep2 := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d2", Annotations: map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: FieldOwner, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: full}}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"config-hash": "h"}, Labels: map[string]string{"l": "v"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "consumer", Image: "i", Args: []string{"--a"}}}},
		}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: 2},
	}
	if _, err := stripManagedFields(dep2); err != nil {
		t.Fatal(err)
	}
	if len(dep2.Spec.Template.Spec.Containers) != 0 || dep2.Spec.Template.Annotations["config-hash"] != "h" || dep2.Spec.Template.Labels["l"] != "v" ||
		*dep2.Spec.Replicas != 3 || dep2.Status.ReadyReplicas != 2 || dep2.Annotations["a"] != "b" {
		t.Errorf("slimmed Deployment = %+v, want no pod spec and everything else kept", dep2)
	}
	if len(dep2.ManagedFields) != 1 || ownsReplicas(dep2) {
		t.Errorf("an apply entry without spec.replicas: kept %+v, ownsReplicas %v", dep2.ManagedFields, ownsReplicas(dep2))
	}

	obj := &kafkav1alpha1.IdempotentConsumer{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: entries()}}
	if _, err := stripManagedFields(obj); err != nil {
		t.Fatal(err)
	}
	if obj.ManagedFields != nil {
		t.Errorf("IdempotentConsumer keeps %+v, want none", obj.ManagedFields)
	}

	meta := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: entries()}}
	if _, err := stripManagedFields(meta); err != nil {
		t.Fatal(err)
	}
	if meta.ManagedFields != nil {
		t.Errorf("Secret metadata keeps %+v, want none", meta.ManagedFields)
	}

	// Something without metadata is stored as it is.
	if out, err := stripManagedFields("not an object"); err != nil || out != "not an object" {
		t.Errorf("stripManagedFields(string) = %v, %v", out, err)
	}
}
