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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// reconcileDeployment applies the consumer Deployment and reports its
// rollout as ConsumerReady. The Deployment is first created only once the
// table is ready (a consumer without its table would only fail); after that
// spec changes are applied whatever the database's state.
func (r *IdempotentConsumerReconciler) reconcileDeployment(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	name := DeploymentName(obj)
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
	desired := BuildDeployment(obj, BuildOptions{DefaultImage: r.Options.ConsumerImage, ConfigHash: configHash(values)})
	if prob != nil && current != nil {
		// Keep the pods running on the old credentials until the Secret is fixed.
		desired.Spec.Template.Annotations[AnnotationConfigHash] = current.Spec.Template.Annotations[AnnotationConfigHash]
		desired.Annotations[AnnotationSpecHash] = specHash(desired)
	}

	if current == nil || current.Annotations[AnnotationSpecHash] != desired.Annotations[AnnotationSpecHash] ||
		current.Spec.Replicas == nil || *current.Spec.Replicas != *desired.Spec.Replicas {
		applied, err := r.applyDeployment(ctx, desired)
		if err != nil {
			return err
		}
		if current == nil {
			r.event(obj, corev1.EventTypeNormal, "DeploymentCreated", "ApplyDeployment", fmt.Sprintf("Created consumer Deployment %s", name))
		}
		current = applied
	}

	obj.Status.Replicas = current.Status.Replicas
	obj.Status.ReadyReplicas = current.Status.ReadyReplicas
	obj.Status.Selector = metav1.FormatLabelSelector(desired.Spec.Selector)
	if prob == nil {
		r.consumerStatus(s, current)
	}
	return nil
}

// readConsumerSecrets reads every Secret key the consumer gets, for the
// config hash that rolls the pods when a credential changes.
func (r *IdempotentConsumerReconciler) readConsumerSecrets(ctx context.Context, s *reconcileState) ([]secretValue, *problem, error) {
	var values []secretValue
	for i, ref := range secretRefs(s.obj) {
		if i == 0 && s.databaseURL.value != "" {
			values = append(values, s.databaseURL)
			continue
		}
		v, prob, err := r.readSecretKey(ctx, s.obj.Namespace, ref)
		if err != nil || prob != nil {
			return nil, prob, err
		}
		s.addSecret(v.value, false)
		values = append(values, v)
	}
	return values, nil, nil
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

// consumerStatus derives ConsumerReady from the Deployment's status.
func (r *IdempotentConsumerReconciler) consumerStatus(s *reconcileState, dep *appsv1.Deployment) {
	obj := s.obj
	want := obj.Replicas()
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

// consumerNotReady records a consumer problem.
func (r *IdempotentConsumerReconciler) consumerNotReady(ctx context.Context, s *reconcileState, reason, message string, transient bool) {
	message = s.scrub(message)
	prev := s.obj.GetCondition(kafkav1alpha1.ConditionConsumerReady)
	s.obj.SetCondition(kafkav1alpha1.ConditionConsumerReady, metav1.ConditionFalse, reason, message)
	if transient {
		s.retry(reason, message)
	} else {
		s.stall(reason, message)
	}
	observeProblem(reason)
	if prev == nil || prev.Reason != reason {
		r.event(s.obj, corev1.EventTypeWarning, reason, "ApplyDeployment", message)
		log.FromContext(ctx).Info("Consumer not ready", "reason", reason, "message", message)
	}
}
