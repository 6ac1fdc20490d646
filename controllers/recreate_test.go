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
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// TestRecreatedObjectTakesOverWhenOldDeploymentGoes: an object deleted and
// created again under the same name (a new UID) while the old object's
// Deployment still exists is Stalled with DeploymentNotOwned; when the
// garbage collector deletes that Deployment the new object is reconciled at
// once and creates its own, instead of waiting for its timed reconcile
// (made an hour away here, so only the Deployment's deletion can wake it).
func TestRecreatedObjectTakesOverWhenOldDeploymentGoes(t *testing.T) {
	te, ns, old, depKey := readyObjectWithoutTimers(t)
	ctx := context.Background()
	oldDep := &appsv1.Deployment{}
	if err := te.c.Get(ctx, depKey, oldDep); err != nil {
		t.Fatal(err)
	}

	if err := te.c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the first object gone", func() (bool, string) {
		err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders"}, &kafkav1alpha1.IdempotentConsumer{})
		return apierrors.IsNotFound(err), ""
	})

	// Created again before the garbage collector got to the old Deployment;
	// another table, so the database phase has nothing to refuse.
	te.create(t, newConsumer(ns, "orders", withTable("orders_again")))
	b := te.waitCondition(t, ns, "orders", kafkav1alpha1.ConditionConsumerReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDeploymentConflict)
	if b.UID == old.UID {
		t.Fatal("the object kept its UID")
	}
	assertSummary(t, b, kafkav1alpha1.ReasonDeploymentConflict, true)

	// envtest runs no garbage collector: delete the old Deployment as the
	// cluster's would (only that one: the precondition names its UID).
	uid := oldDep.UID
	if err := te.c.Delete(ctx, oldDep, client.Preconditions{UID: &uid}); err != nil {
		t.Fatal(err)
	}
	now := te.waitReady(t, ns, "orders")
	dep := &appsv1.Deployment{}
	if err := te.c.Get(ctx, depKey, dep); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(dep, now) {
		t.Fatalf("Deployment %s is controlled by %v, want the new object %s", depKey.Name, metav1.GetControllerOf(dep), now.UID)
	}
}

// TestRecreatedObjectTakesOverWhenOrphanedDeploymentGoes: the same, but the
// old object was deleted with --cascade=orphan, so its Deployment lost its
// owner reference (the garbage collector removes it) and is labelled ours
// but owned by nobody. The object created again is Stalled with
// DeploymentNotOwned; when someone deletes that Deployment it is reconciled
// at once, although no owner reference leads from the Deployment to it.
func TestRecreatedObjectTakesOverWhenOrphanedDeploymentGoes(t *testing.T) {
	te, ns, old, depKey := readyObjectWithoutTimers(t)
	ctx := context.Background()

	// What the garbage collector does for a delete with the orphan policy
	// (envtest has none): the owner reference goes, then the object.
	orphan := &appsv1.Deployment{}
	if err := te.c.Get(ctx, depKey, orphan); err != nil {
		t.Fatal(err)
	}
	orphan.OwnerReferences = nil
	if err := te.c.Update(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if err := te.c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the first object gone", func() (bool, string) {
		err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders"}, &kafkav1alpha1.IdempotentConsumer{})
		return apierrors.IsNotFound(err), ""
	})
	if err := te.c.Get(ctx, depKey, orphan); err != nil || len(orphan.OwnerReferences) != 0 {
		t.Fatalf("the orphaned Deployment: %v, owner references %v", err, orphan.OwnerReferences)
	}

	te.create(t, newConsumer(ns, "orders", withTable("orders_again")))
	b := te.waitCondition(t, ns, "orders", kafkav1alpha1.ConditionConsumerReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDeploymentConflict)
	assertSummary(t, b, kafkav1alpha1.ReasonDeploymentConflict, true)

	uid := orphan.UID
	if err := te.c.Delete(ctx, orphan, client.Preconditions{UID: &uid}); err != nil {
		t.Fatal(err)
	}
	now := te.waitReady(t, ns, "orders")
	dep := &appsv1.Deployment{}
	if err := te.c.Get(ctx, depKey, dep); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(dep, now) {
		t.Fatalf("Deployment %s is controlled by %v, want the new object %s", depKey.Name, metav1.GetControllerOf(dep), now.UID)
	}
}

// readyObjectWithoutTimers starts an operator whose retries and topic
// checks are an hour away (so only a watch can wake an object), and makes
// the object "orders" Ready; it returns the object and its Deployment's key.
func readyObjectWithoutTimers(t *testing.T) (*testEnv, string, *kafkav1alpha1.IdempotentConsumer, types.NamespacedName) {
	t.Helper()
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{options: Options{
		RetryBase: time.Hour, RetryMax: time.Hour,
		TopicRetryBase: time.Hour, TopicRetryMax: time.Hour, TopicCheckInterval: -1,
	}})
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	te.create(t, newConsumer(ns, "orders"))
	old := te.waitReady(t, ns, "orders")
	return te, ns, old, types.NamespacedName{Namespace: ns, Name: objects.DeploymentName(old)}
}
