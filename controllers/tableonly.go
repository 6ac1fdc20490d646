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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// Table only: an object without spec.consumer gets its table, partitions
// and application Secret, and no Deployment. Ready then means the table
// is ready and maintained; the consumer's conditions and status fields are
// absent rather than False, so kstatus and Argo CD see a healthy object.

// ReasonDeploymentDeleted is the reason of the Normal Event recorded when
// spec.consumer was removed and the operator deleted the Deployment it ran.
const ReasonDeploymentDeleted = "DeploymentDeleted"

// reconcileWorkload is the consumer phase: the Deployment with
// spec.consumer, its removal without.
func (r *IdempotentConsumerReconciler) reconcileWorkload(ctx context.Context, s *reconcileState) error {
	if s.obj.HasConsumer() {
		return r.reconcileDeployment(ctx, s)
	}
	return r.removeConsumer(ctx, s)
}

// removeConsumer deletes the consumer Deployment this object controls, if
// any (spec.consumer was removed: the application runs its own consumer
// now), and clears what described it. A Deployment of that name that this
// object does not control is left alone.
func (r *IdempotentConsumerReconciler) removeConsumer(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	name := objects.DeploymentName(obj)
	dep := &appsv1.Deployment{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: name}, dep)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading Deployment %s: %w", name, err)
	case metav1.IsControlledBy(dep, obj) && dep.DeletionTimestamp.IsZero():
		if err := r.Client.Delete(ctx, dep, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: &dep.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Deployment %s: %w", name, err)
		}
		msg := fmt.Sprintf("spec.consumer was removed (table only): deleted the consumer Deployment %s; table %s and its rows stay", name, obj.Status.Table)
		r.event(obj, corev1.EventTypeNormal, ReasonDeploymentDeleted, actionApplyDeployment, msg)
		log.FromContext(ctx).Info("Deleted the consumer Deployment: table only", "deployment", name)
	}
	obj.Status.DeploymentName = ""
	obj.Status.Replicas = 0
	obj.Status.ReadyReplicas = 0
	obj.Status.Selector = ""
	meta.RemoveStatusCondition(&obj.Status.Conditions, kafkav1alpha1.ConditionConsumerReady)
	meta.RemoveStatusCondition(&obj.Status.Conditions, kafkav1alpha1.ConditionReplicasWithinPartitions)
	s.consumerOK = true
	return nil
}

// readyMessage is Ready's message when everything is ready.
func readyMessage(obj *kafkav1alpha1.IdempotentConsumer) string {
	w := obj.Status.Window
	switch {
	case !obj.HasConsumer() && w != nil:
		return fmt.Sprintf("Table %s covers %s (table only: no consumer Deployment; Secret %s says how to use it)", obj.Status.Table, w.Summary, obj.Status.ApplicationSecretName)
	case !obj.HasConsumer():
		return "Table and partitions are ready (table only: no consumer Deployment)"
	case w != nil:
		return fmt.Sprintf("Table %s covers %s; consumer %s is available", obj.Status.Table, w.Summary, obj.Status.DeploymentName)
	}
	return "Table, partitions and consumer are ready"
}
