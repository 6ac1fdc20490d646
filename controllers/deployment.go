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
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/sink"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// reconcileDeployment applies the consumer Deployment and reports its
// rollout as ConsumerReady. The Deployment is first created only once the
// table is ready (a consumer without its table would only fail); after that
// spec changes are applied whatever the database's state.
func (r *IdempotentConsumerReconciler) reconcileDeployment(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	name := objects.DeploymentName(obj)
	obj.Status.DeploymentName = name

	current := &appsv1.Deployment{}
	key := types.NamespacedName{Namespace: obj.Namespace, Name: name}
	err := r.Client.Get(ctx, key, current)
	switch {
	case apierrors.IsNotFound(err):
		// The cache holds only Deployments labelled as ours: ask the API
		// server whether someone else's has this name before creating.
		other := &metav1.PartialObjectMetadata{}
		other.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
		if err := r.APIReader.Get(ctx, key, other); err == nil {
			r.consumerNotReady(ctx, s, kafkav1alpha1.ReasonDeploymentConflict, fmt.Sprintf(
				"Deployment %q exists and is not managed by this object; rename or delete it", name), false)
			return nil
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("checking for Deployment %s: %w", name, err)
		}
		current = nil
	case err != nil:
		return fmt.Errorf("reading Deployment %s: %w", name, err)
	case !metav1.IsControlledBy(current, obj):
		r.consumerNotReady(ctx, s, kafkav1alpha1.ReasonDeploymentConflict, fmt.Sprintf(
			"Deployment %q is not controlled by this object; rename or delete it", name), false)
		return nil
	}

	if current == nil && !(s.databaseOK && s.partitionsOK) {
		obj.SetCondition(kafkav1alpha1.ConditionConsumerReady, metav1.ConditionFalse, kafkav1alpha1.ReasonWaitingForDatabase,
			"The consumer Deployment is created once the table and its partitions are ready")
		return nil
	}

	values, prob, err := r.readConsumerSecrets(ctx, s)
	if err != nil {
		return err
	}
	if prob != nil {
		// The pods would fail with CreateContainerConfigError; say why here.
		r.consumerNotReady(ctx, s, prob.reason, prob.message, false)
		if current == nil {
			return nil
		}
	}
	hashKey, err := r.configHashKey(ctx)
	if err != nil {
		return err
	}
	desired := objects.Deployment(obj, objects.Options{DefaultImage: r.Options.ConsumerImage, ConfigHash: configHash(hashKey, values), Autoscaled: s.autoscale})
	if prob != nil && current != nil {
		// Keep the pods running on the old credentials until the Secret is fixed.
		desired.Spec.Template.Annotations[objects.AnnotationConfigHash] = current.Spec.Template.Annotations[objects.AnnotationConfigHash]
		desired.Annotations[objects.AnnotationSpecHash] = objects.SpecHash(desired)
	}

	// A template change of the operator's own (a new release's builder)
	// waits for a rollout slot; the Deployment stays as it is (rollout.go).
	desired.Annotations[AnnotationTemplateHash] = templateHash(&desired.Spec.Template)
	sameSecrets := func(currentHash, desiredHash string) bool {
		return sameSecretValues(hashKey, currentHash, desiredHash, values)
	}
	gate, err := r.gateTemplate(ctx, s, current, desired, sameSecrets)
	if err != nil {
		return err
	}
	changed := !gate.wait && (current == nil || current.Annotations[objects.AnnotationSpecHash] != desired.Annotations[objects.AnnotationSpecHash])

	// A changed template is first judged by the API server's Pod Security
	// admission (podsecurity.go); a refused one is not applied.
	var refused *problem
	if changed {
		if refused, err = r.checkPodSecurity(ctx, desired); err != nil {
			return err
		} else if refused != nil {
			r.consumerNotReady(ctx, s, refused.reason, refused.message, false)
			if current == nil {
				return nil
			}
		}
	}

	// Replicas are compared besides the hash: kubectl scale on the
	// Deployment is reverted at once, unless KEDA owns the count.
	replicasDrifted := !s.autoscale && (current == nil || current.Spec.Replicas == nil || *current.Spec.Replicas != *desired.Spec.Replicas)
	didApply := false
	if refused == nil && !gate.wait && (changed || replicasDrifted) {
		if s.autoscale && current != nil && current.Spec.Replicas != nil && ownsReplicas(current) {
			if err := r.handOverReplicas(ctx, current); err != nil {
				return err
			}
		}
		applied, err := r.applyDeployment(ctx, desired)
		if err != nil {
			return err
		}
		if current == nil {
			r.event(obj, corev1.EventTypeNormal, ReasonDeploymentCreated, actionApplyDeployment, fmt.Sprintf("Created consumer Deployment %s", name))
		}
		current, didApply = applied, true
	}
	if err := r.templateUpgraded(ctx, s, gate, didApply, current); err != nil {
		return err
	}
	if refused == nil && !gate.wait {
		r.recordIdempotencyKey(ctx, s)
	}

	s.deploymentExists = true
	obj.Status.Replicas = current.Status.Replicas
	obj.Status.ReadyReplicas = current.Status.ReadyReplicas
	obj.Status.Selector = metav1.FormatLabelSelector(desired.Spec.Selector)
	if prob == nil && refused == nil {
		want := obj.Replicas()
		if s.autoscale {
			want = ptr.Deref(current.Spec.Replicas, 1)
		}
		r.consumerStatus(s, current, want)
	}
	return nil
}

// applyDeployment server-side applies the built Deployment: the fields it
// sets are owned by the operator and drift back on the next apply; fields it
// leaves out (set by other controllers) are left alone.
func (r *IdempotentConsumerReconciler) applyDeployment(ctx context.Context, desired *appsv1.Deployment) (*appsv1.Deployment, error) {
	// The builder returns a typed object for testability; an apply
	// configuration carries only the fields it set (JSON omits the rest).
	b, err := json.Marshal(desired)
	if err != nil {
		return nil, fmt.Errorf("encoding Deployment %s: %w", desired.Name, err)
	}
	ac := &appsv1ac.DeploymentApplyConfiguration{}
	if err := json.Unmarshal(b, ac); err != nil {
		return nil, fmt.Errorf("encoding Deployment %s: %w", desired.Name, err)
	}
	ac.Status = nil
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("applying Deployment %s: %w", desired.Name, err)
	}
	b, err = json.Marshal(ac)
	if err != nil {
		return nil, fmt.Errorf("decoding applied Deployment %s: %w", desired.Name, err)
	}
	applied := &appsv1.Deployment{}
	if err := json.Unmarshal(b, applied); err != nil {
		return nil, fmt.Errorf("decoding applied Deployment %s: %w", desired.Name, err)
	}
	return applied, nil
}

// handoverFieldOwner co-owns spec.replicas of a Deployment for the moment
// the operator lets go of it (see handOverReplicas).
const handoverFieldOwner = FieldOwner + "-handover"

// ownsReplicas reports whether the operator's apply owns spec.replicas.
func ownsReplicas(dep *appsv1.Deployment) bool {
	for _, mf := range dep.ManagedFields {
		if mf.Manager == FieldOwner && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "" &&
			mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), `"f:replicas"`) {
			return true
		}
	}
	return false
}

// handOverReplicas keeps the current replica count when KEDA takes over. An
// apply that drops a field its manager alone owned deletes it (the count
// would fall back to 1 until KEDA acts), so another field manager first
// applies the same count; KEDA's HPA takes the field from it on its first
// scale.
func (r *IdempotentConsumerReconciler) handOverReplicas(ctx context.Context, current *appsv1.Deployment) error {
	ac := appsv1ac.Deployment(current.Name, current.Namespace).
		WithSpec(appsv1ac.DeploymentSpec().WithReplicas(*current.Spec.Replicas))
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(handoverFieldOwner)); err != nil {
		return fmt.Errorf("handing the replica count of Deployment %s over to KEDA: %w", current.Name, err)
	}
	return nil
}

// consumerStatus derives ConsumerReady from the Deployment's status.
// want is the replica count asked for: spec.consumer.replicas, or KEDA's
// choice when it scales the consumer.
func (r *IdempotentConsumerReconciler) consumerStatus(s *reconcileState, dep *appsv1.Deployment, want int32) {
	obj := s.obj
	set := func(status metav1.ConditionStatus, reason, msg string) {
		obj.SetCondition(kafkav1alpha1.ConditionConsumerReady, status, reason, msg)
	}
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			msg := fmt.Sprintf("Deployment %s failed to roll out: %s", dep.Name, c.Message)
			set(metav1.ConditionFalse, kafkav1alpha1.ReasonDeploymentFailed, msg)
			s.stall(kafkav1alpha1.ReasonDeploymentFailed, msg)
			return
		}
	}
	switch {
	case dep.Generation > dep.Status.ObservedGeneration:
		msg := fmt.Sprintf("Deployment %s: waiting for the rollout of generation %d to start", dep.Name, dep.Generation)
		set(metav1.ConditionFalse, kafkav1alpha1.ReasonDeploymentProgressing, msg)
		s.wait(kafkav1alpha1.ReasonDeploymentProgressing, msg)
	case want == 0 && dep.Status.Replicas == 0:
		set(metav1.ConditionTrue, kafkav1alpha1.ReasonScaledToZero, fmt.Sprintf("Deployment %s is scaled to zero", dep.Name))
		s.consumerOK = true
	case dep.Status.UpdatedReplicas >= want && dep.Status.AvailableReplicas >= want && dep.Status.Replicas == dep.Status.UpdatedReplicas:
		set(metav1.ConditionTrue, kafkav1alpha1.ReasonDeploymentAvailable,
			fmt.Sprintf("Deployment %s has %d/%d replicas available", dep.Name, dep.Status.AvailableReplicas, want))
		s.consumerOK = true
	default:
		msg := fmt.Sprintf("Deployment %s is rolling out: %d/%d replicas updated, %d available",
			dep.Name, dep.Status.UpdatedReplicas, want, dep.Status.AvailableReplicas)
		set(metav1.ConditionFalse, kafkav1alpha1.ReasonDeploymentProgressing, msg)
		s.wait(kafkav1alpha1.ReasonDeploymentProgressing, msg)
	}
}

// recordIdempotencyKey keeps status.idempotencyKey on the HTTP sink's
// template the Deployment now carries. A changed template is a Warning
// Event and the condition IdempotencyKeyChanged: every redelivery of an
// event sent under the previous template looks new to the provider, which
// applies it again (docs/consumer.md, Sinks). The condition turns False
// once the dedup retention has passed since the change.
func (r *IdempotentConsumerReconciler) recordIdempotencyKey(ctx context.Context, s *reconcileState) {
	obj := s.obj
	h := obj.Spec.Consumer.Sink.HTTP
	if obj.Spec.Consumer.Sink.Type != kafkav1alpha1.SinkHTTP || h == nil {
		return // kept: a sink that becomes HTTP again is compared with it
	}
	tmpl := h.IdempotencyKey
	if tmpl == "" {
		tmpl = sink.DefaultIdempotencyKey
	}
	st := obj.Status.IdempotencyKey
	switch {
	case st == nil:
		obj.Status.IdempotencyKey = &kafkav1alpha1.IdempotencyKeyStatus{Template: tmpl}
	case st.Template != tmpl:
		msg := fmt.Sprintf("The HTTP sink's Idempotency-Key template changed from %q to %q: every redelivery of an event already sent under %q (a replay, an offset reset, a retry after a crash) now carries a new key, so the provider treats it as new and applies it again",
			st.Template, tmpl, st.Template)
		obj.Status.IdempotencyKey = &kafkav1alpha1.IdempotencyKeyStatus{Template: tmpl, Previous: st.Template, ChangedTime: ptr.To(metav1.NewTime(s.now))}
		meta.RemoveStatusCondition(&obj.Status.Conditions, kafkav1alpha1.ConditionIdempotencyKeyChanged) // a new transition time
		obj.SetCondition(kafkav1alpha1.ConditionIdempotencyKeyChanged, metav1.ConditionTrue, kafkav1alpha1.ReasonIdempotencyKeyChanged, msg)
		r.event(obj, corev1.EventTypeWarning, kafkav1alpha1.ReasonIdempotencyKeyChanged, actionApplyDeployment, msg)
		log.FromContext(ctx).Info("Idempotency-Key template changed", "from", st.Template, "to", tmpl)
	case st.ChangedTime != nil && s.now.Sub(st.ChangedTime.Time) > obj.Retention():
		// Every event sent under the previous template is now older than the
		// dedup window: its redelivery is outside_window whatever the key.
		c := obj.GetCondition(kafkav1alpha1.ConditionIdempotencyKeyChanged)
		if c == nil || c.Status == metav1.ConditionFalse {
			return
		}
		msg := fmt.Sprintf("The HTTP sink's Idempotency-Key template changed from %q to %q at %s, more than the dedup retention (%s) ago: every event sent under %q is outside the dedup window now",
			st.Previous, tmpl, st.ChangedTime.UTC().Format(time.RFC3339), obj.Retention(), st.Previous)
		obj.SetCondition(kafkav1alpha1.ConditionIdempotencyKeyChanged, metav1.ConditionFalse, kafkav1alpha1.ReasonIdempotencyKeySettled, msg)
		r.event(obj, corev1.EventTypeNormal, kafkav1alpha1.ReasonIdempotencyKeySettled, actionApplyDeployment, msg)
	}
}
