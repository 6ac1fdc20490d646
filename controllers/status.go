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

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// summarize sets Ready, Reconciling and Stalled from what the phases
// recorded, following kstatus: Reconciling and Stalled are present only
// while true, Ready is always present.
func (r *IdempotentConsumerReconciler) summarize(s *reconcileState) {
	obj := s.obj
	setAbnormal := func(condType string, p *problem) {
		if p == nil {
			meta.RemoveStatusCondition(&obj.Status.Conditions, condType)
			return
		}
		obj.SetCondition(condType, metav1.ConditionTrue, p.reason, p.message)
	}
	switch {
	case s.stalled != nil:
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, s.stalled.reason, s.stalled.message)
		setAbnormal(kafkav1alpha1.ConditionStalled, s.stalled)
		setAbnormal(kafkav1alpha1.ConditionReconciling, nil)
	case s.transient != nil:
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, s.transient.reason, s.transient.message)
		setAbnormal(kafkav1alpha1.ConditionStalled, nil)
		setAbnormal(kafkav1alpha1.ConditionReconciling, &problem{kafkav1alpha1.ReasonRetrying, s.transient.message})
	case s.progressing != nil || !(s.databaseOK && s.partitionsOK && s.consumerOK):
		p := s.progressing
		if p == nil {
			p = &problem{kafkav1alpha1.ReasonProgressing, "Reconciling"}
		}
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, p.reason, p.message)
		setAbnormal(kafkav1alpha1.ConditionStalled, nil)
		setAbnormal(kafkav1alpha1.ConditionReconciling, &problem{kafkav1alpha1.ReasonProgressing, p.message})
	default:
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady, readyMessage(obj))
		setAbnormal(kafkav1alpha1.ConditionStalled, nil)
		setAbnormal(kafkav1alpha1.ConditionReconciling, nil)
	}
	obj.Status.ObservedGeneration = obj.Generation
}

// markSuspended reports a suspended object: nothing was checked, so the
// component conditions keep their last values and Ready says why.
func (r *IdempotentConsumerReconciler) markSuspended(s *reconcileState) {
	obj := s.obj
	obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSuspended,
		"Reconciliation is suspended (spec.suspend): no partition maintenance and no Deployment changes")
	meta.RemoveStatusCondition(&obj.Status.Conditions, kafkav1alpha1.ConditionReconciling)
	meta.RemoveStatusCondition(&obj.Status.Conditions, kafkav1alpha1.ConditionStalled)
	obj.Status.NextMaintenanceTime = nil
	obj.Status.ObservedGeneration = obj.Generation
}

// finish summarizes, schedules the next reconcile and writes status once,
// only if it changed.
func (r *IdempotentConsumerReconciler) finish(ctx context.Context, orig *kafkav1alpha1.IdempotentConsumer, s *reconcileState) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: s.obj.Namespace, Name: s.obj.Name}
	if !s.obj.Spec.Suspend {
		r.summarize(s)
	}
	if s.stalled != nil || s.transient != nil {
		s.requeue(r.backoff.next(key))
	} else {
		r.backoff.reset(key)
	}
	if err := r.patchStatus(ctx, orig, s.obj); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.requeueAfter}, nil
}

// patchStatus writes obj's status if it differs from orig's.
func (r *IdempotentConsumerReconciler) patchStatus(ctx context.Context, orig, obj *kafkav1alpha1.IdempotentConsumer) error {
	if equality.Semantic.DeepEqual(orig.Status, obj.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, obj, client.MergeFrom(orig)); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		return fmt.Errorf("writing status: %w", err)
	}
	return nil
}
