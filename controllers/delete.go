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
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=delete

// reconcileFinalizer keeps the finalizer in step with deletionPolicy: only
// Delete needs cleanup, so only Delete holds the object on deletion.
func (r *IdempotentConsumerReconciler) reconcileFinalizer(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer) error {
	want := obj.DeletionPolicy() == kafkav1alpha1.DeletionDelete || sharedTable(obj) // a shared table's user must unregister
	if want == controllerutil.ContainsFinalizer(obj, Finalizer) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopy())
	if want {
		controllerutil.AddFinalizer(obj, Finalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, Finalizer)
	}
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("updating finalizer: %w", err)
	}
	return nil
}

// reconcileDelete handles an object being deleted. With Retain (or no
// finalizer) there is nothing to do: the Deployment goes with its owner.
// With Delete, the consumer is stopped, then the table dropped, and only if
// it carries this object's marker; then the finalizer is removed. If the
// database URL Secret (or its key) is gone, the table is kept, a TableKept
// Warning Event names it, and the finalizer is removed: nothing the
// operator can do brings the Secret back. If the database cannot be
// reached the object waits, with the reason in status; switching
// deletionPolicy to Retain releases it.
func (r *IdempotentConsumerReconciler) reconcileDelete(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		r.forget(key)
		return ctrl.Result{}, nil
	}
	if obj.DeletionPolicy() != kafkav1alpha1.DeletionDelete && !sharedTable(obj) {
		r.event(obj, corev1.EventTypeNormal, ReasonTableRetained, actionDelete,
			fmt.Sprintf("deletionPolicy is Retain: table %s is kept", tableOf(obj)))
		return ctrl.Result{}, r.removeFinalizer(ctx, obj)
	}

	// Stop the consumer first, so it does not fail against a dropped table.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: objects.DeploymentName(obj)}}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); err == nil && metav1.IsControlledBy(dep, obj) {
		if err := r.Client.Delete(ctx, dep, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting Deployment %s: %w", dep.Name, err)
		}
	} else if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("reading Deployment %s: %w", dep.Name, err)
	}

	if _, _, err := r.resolvePlatforms(ctx, obj, false); err != nil { // platforms.go
		return ctrl.Result{}, err
	}
	orig := obj.DeepCopy()
	s := &reconcileState{obj: obj, now: r.Clock.Now()}
	table := tableOf(obj)
	val, prob, err := r.readSecretKey(ctx, obj.Namespace, obj.Spec.Database.URLSecretRef)
	if err != nil {
		return ctrl.Result{}, err
	}
	var db DatabaseConn
	if prob == nil {
		s.databaseURL = val
		s.addSecret(val.value, true)
		if db, prob, err = r.databaseConn(ctx, s, val.value); err != nil {
			return ctrl.Result{}, err
		}
	}
	if prob != nil && (prob.reason == kafkav1alpha1.ReasonSecretNotFound || prob.reason == kafkav1alpha1.ReasonSecretKeyMissing) {
		// Without the URL (or CA) Secret the operator cannot reach the
		// database, and waiting would block the deletion for good: in a
		// terminating namespace nothing can recreate the Secret. The table is
		// kept (the safe outcome, as with Retain) and named, and deletion goes
		// on. In a terminating namespace the API server refuses the Event; the
		// log line is the record there.
		msg := fmt.Sprintf("Table %s was kept, not dropped: %s, so the operator cannot reach the database. Deletion goes on; drop the table by hand if it is no longer needed",
			table, prob.message)
		r.event(obj, corev1.EventTypeWarning, ReasonTableKept, actionDelete, msg)
		log.FromContext(ctx).Info("Table kept: a Secret it needs is gone", "table", table.String(), "reason", prob.reason)
		return ctrl.Result{}, r.removeFinalizer(ctx, obj)
	}
	if prob == nil && sharedTable(obj) {
		if err = r.leaveSharedTable(ctx, obj, db, table); err == nil { // sharing.go
			return ctrl.Result{}, r.removeFinalizer(ctx, obj)
		}
		reason, _ := classifyDatabaseError(err)
		logDatabaseDetail(ctx, s, reason, err)
		prob = &problem{reason, describeDatabaseError(reason, err)}
	}
	if prob == nil {
		err = r.dropTable(ctx, obj, db, table)
		var own *dedup.OwnershipError
		switch {
		case err == nil:
			r.event(obj, corev1.EventTypeNormal, ReasonTableDropped, actionDelete, fmt.Sprintf("Dropped table %s (deletionPolicy Delete)", table))
			log.FromContext(ctx).Info("Dropped table", "table", table.String())
			return ctrl.Result{}, r.removeFinalizer(ctx, obj)
		case errors.As(err, &own):
			msg := fmt.Sprintf("Table %s was not dropped: it is not this object's (owner %q); left in place", table, own.Owner)
			r.event(obj, corev1.EventTypeWarning, kafkav1alpha1.ReasonTableNotOwned, actionDelete, msg)
			log.FromContext(ctx).Info("Table not dropped: not ours", "table", table.String(), "owner", own.Owner)
			return ctrl.Result{}, r.removeFinalizer(ctx, obj)
		}
		reason, _ := classifyDatabaseError(err)
		logDatabaseDetail(ctx, s, reason, err)
		prob = &problem{reason, describeDatabaseError(reason, err)}
	}

	// Could not drop: say why and try again later.
	msg := s.scrub(fmt.Sprintf("Waiting to drop table %s before deletion completes (set deletionPolicy to Retain to skip): %s", table, prob.message))
	if sharedTable(obj) {
		msg = s.scrub(sharedDeleteWait(table, obj, prob.message))
	}
	obj.SetCondition(kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, prob.reason, s.scrub(prob.message))
	startedWaiting := obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDeleting, msg)
	obj.SetCondition(kafkav1alpha1.ConditionReconciling, metav1.ConditionTrue, kafkav1alpha1.ReasonDeleting, msg)
	observeProblem(prob.reason)
	if startedWaiting {
		r.event(obj, corev1.EventTypeWarning, prob.reason, actionDelete, msg)
	}
	if err := r.patchStatus(ctx, orig, obj); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.backoff.next(key)}, nil
}

func (r *IdempotentConsumerReconciler) dropTable(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, db DatabaseConn, table dedup.Table) error {
	store, err := r.Stores.Open(ctx, db, table)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	return store.DropTable(dctx, string(obj.UID))
}

func (r *IdempotentConsumerReconciler) removeFinalizer(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer) error {
	patch := client.MergeFrom(obj.DeepCopy())
	controllerutil.RemoveFinalizer(obj, Finalizer)
	if err := r.Client.Patch(ctx, obj, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	r.forget(types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name})
	return nil
}
