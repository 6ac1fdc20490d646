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
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects;triggerauthentications,verbs=get;create;patch;delete

// kedaDetector remembers whether the cluster serves KEDA's ScaledObject. A
// positive answer holds until an apply finds the kind gone; a negative one is
// trusted for Options.TopicRefresh, because every lookup of a missing API
// group costs a discovery round trip.
type kedaDetector struct {
	mu        sync.Mutex
	installed bool
	checked   time.Time
}

// kedaInstalled reports whether the ScaledObject kind is served.
func (r *IdempotentConsumerReconciler) kedaInstalled(now time.Time) (bool, error) {
	d := &r.keda
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.installed || (!d.checked.IsZero() && !now.Before(d.checked) && now.Sub(d.checked) < r.Options.TopicRefresh) {
		return d.installed, nil
	}
	_, err := r.Client.RESTMapper().RESTMapping(objects.ScaledObjectGVK.GroupKind(), objects.ScaledObjectGVK.Version)
	switch {
	case err == nil:
		d.installed = true
	case meta.IsNoMatchError(err):
		d.installed = false
	default:
		return false, fmt.Errorf("looking up the KEDA ScaledObject API: %w", err)
	}
	d.checked = now
	return d.installed, nil
}

// kedaGone records that KEDA's API went away (its CRD was deleted).
func (r *IdempotentConsumerReconciler) kedaGone(now time.Time) {
	r.keda.mu.Lock()
	defer r.keda.mu.Unlock()
	r.keda.installed, r.keda.checked = false, now
}

// decideAutoscaling settles, before the Deployment is built, whether KEDA
// owns the replica count this reconcile: spec.autoscaling is enabled, KEDA
// is installed, and no ScaledObject of that name belongs to someone else.
// Otherwise the Deployment runs spec.consumer.replicas.
func (r *IdempotentConsumerReconciler) decideAutoscaling(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	if !obj.Autoscaled() {
		meta.RemoveStatusCondition(&obj.Status.Conditions, kafkav1alpha1.ConditionAutoscalingReady)
		return nil
	}
	installed, err := r.kedaInstalled(s.now)
	if err != nil {
		return err
	}
	if !installed {
		r.autoscalingNotReady(ctx, s, kafkav1alpha1.ReasonKEDANotInstalled, fmt.Sprintf(
			"spec.autoscaling is enabled but this cluster does not serve KEDA's ScaledObject (keda.sh/v1alpha1): install KEDA 2.13 or later. "+
				"Until then the consumer runs spec.consumer.replicas (%d)", obj.Replicas()))
		return nil
	}
	current, err := r.getKEDAObject(ctx, objects.ScaledObjectGVK, obj.Namespace, objects.ScaledObjectName(obj))
	if err != nil {
		return err
	}
	if current != nil && !metav1.IsControlledBy(current, obj) {
		r.autoscalingNotReady(ctx, s, kafkav1alpha1.ReasonScaledObjectConflict, fmt.Sprintf(
			"ScaledObject %q exists and is not controlled by this object; rename or delete it. Until then the consumer runs spec.consumer.replicas (%d)",
			current.GetName(), obj.Replicas()))
		return nil
	}
	s.autoscale = true
	s.scaledObject = current
	return nil
}

// reconcileAutoscaling applies the ScaledObject (and, for TLS or SASL, its
// TriggerAuthentication) once the Deployment exists, or removes them when
// autoscaling is off.
func (r *IdempotentConsumerReconciler) reconcileAutoscaling(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	if !obj.Autoscaled() {
		return r.removeAutoscaling(ctx, s)
	}
	if !s.autoscale {
		return nil
	}
	if !s.deploymentExists {
		obj.SetCondition(kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionFalse, kafkav1alpha1.ReasonWaitingForDatabase,
			"The ScaledObject is created once the consumer Deployment exists")
		return nil
	}
	desired := objects.ScaledObject(obj, s.topicPartitions)
	unchanged := s.scaledObject != nil && s.scaledObject.GetAnnotations()[objects.AnnotationSpecHash] == desired.GetAnnotations()[objects.AnnotationSpecHash]
	for _, u := range []*unstructured.Unstructured{objects.TriggerAuthentication(obj), desired} {
		if u == nil || unchanged {
			continue
		}
		err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			r.kedaGone(s.now)
			r.autoscalingNotReady(ctx, s, kafkav1alpha1.ReasonKEDANotInstalled, fmt.Sprintf(
				"Applying %s %s: KEDA's API is gone from this cluster (%v); install KEDA 2.13 or later", u.GetKind(), u.GetName(), err))
			return nil
		}
		if err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	if !unchanged && objects.TriggerAuthentication(obj) == nil {
		if err := r.deleteKEDAObject(ctx, obj, objects.TriggerAuthenticationGVK, objects.ScaledObjectName(obj)); err != nil {
			return err
		}
	}
	obj.Status.ScaledObjectName = objects.ScaledObjectName(obj)

	lo, hi := objects.ScaledObjectBounds(obj, s.topicPartitions)
	msg := fmt.Sprintf("ScaledObject %s scales Deployment %s between %d and %d replicas on the lag of group %q (target %d per replica)",
		objects.ScaledObjectName(obj), objects.DeploymentName(obj), lo, hi, obj.Spec.Kafka.GroupID, obj.Spec.Autoscaling.LagThresholdOrDefault())
	if hi < obj.Spec.Autoscaling.MaxReplicas {
		msg += fmt.Sprintf("; maxReplicas %d capped at the topic's %d partitions", obj.Spec.Autoscaling.MaxReplicas, hi)
	}
	// KEDA's own verdict, as of the last read (ScaledObjects are not watched).
	if ready := kedaReadyCondition(s.scaledObject); ready != nil && ready.Status == metav1.ConditionFalse {
		r.autoscalingNotReady(ctx, s, kafkav1alpha1.ReasonScaledObjectNotReady, fmt.Sprintf("%s; KEDA reports it not ready: %s: %s", msg, ready.Reason, ready.Message))
		return nil
	}
	obj.SetCondition(kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionTrue, kafkav1alpha1.ReasonScaledObjectApplied, msg)
	return nil
}

// removeAutoscaling deletes the ScaledObject and TriggerAuthentication this
// object created, if KEDA is there to have them. Objects that never had
// autoscaling (no spec.autoscaling, no status.scaledObjectName) cost no API
// call.
func (r *IdempotentConsumerReconciler) removeAutoscaling(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	if obj.Spec.Autoscaling == nil && obj.Status.ScaledObjectName == "" {
		return nil
	}
	installed, err := r.kedaInstalled(s.now)
	if err != nil || !installed {
		obj.Status.ScaledObjectName = ""
		return err
	}
	for _, gvk := range []schema.GroupVersionKind{objects.ScaledObjectGVK, objects.TriggerAuthenticationGVK} {
		if err := r.deleteKEDAObject(ctx, obj, gvk, objects.ScaledObjectName(obj)); err != nil {
			return err
		}
	}
	obj.Status.ScaledObjectName = ""
	return nil
}

// getKEDAObject reads a KEDA object from the API server (they are not
// cached: the operator does not watch them). Missing is nil.
func (r *IdempotentConsumerReconciler) getKEDAObject(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, u)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s %s: %w", gvk.Kind, name, err)
	}
	return u, nil
}

// deleteKEDAObject deletes the named KEDA object if this object controls it.
func (r *IdempotentConsumerReconciler) deleteKEDAObject(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, gvk schema.GroupVersionKind, name string) error {
	u, err := r.getKEDAObject(ctx, gvk, obj.Namespace, name)
	if err != nil || u == nil || !metav1.IsControlledBy(u, obj) {
		return err
	}
	if err := r.Client.Delete(ctx, u, client.Preconditions{UID: ptrUID(u.GetUID())}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s %s: %w", gvk.Kind, name, err)
	}
	log.FromContext(ctx).Info("Deleted KEDA object: autoscaling is off", "kind", gvk.Kind, "name", name)
	return nil
}

func ptrUID(u types.UID) *types.UID { return &u }

// kedaReadyCondition is the Ready condition KEDA wrote on a ScaledObject.
func kedaReadyCondition(u *unstructured.Unstructured) *metav1.Condition {
	if u == nil {
		return nil
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		str := func(k string) string { v, _ := m[k].(string); return v }
		return &metav1.Condition{Type: "Ready", Status: metav1.ConditionStatus(str("status")), Reason: str("reason"), Message: str("message")}
	}
	return nil
}
