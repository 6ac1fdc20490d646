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
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The defaults that decide how fast a large cluster becomes Ready. A new
// object's first reconcile is mostly waiting on its database: a handful of
// DDL transactions (the table, its positions table, the claim functions,
// then the first partitions of the retention window and the premade ones,
// sixteen to a transaction), each partition some files and a B-tree build that PostgreSQL
// syncs to disk, and a handful of API calls. Reconciles of different objects
// are independent (each table has its own advisory lock), so they run side
// by side; the number of connections per database URL, not the number of
// workers, bounds what one database sees. See docs/scaling.md for the
// measurements.
const (
	// DefaultMaxConcurrentReconciles is the number of objects reconciled at
	// once (--max-concurrent-reconciles). Workers beyond the database
	// connections still overlap their API calls with other objects' DDL.
	DefaultMaxConcurrentReconciles = 16
	// DefaultDatabaseMaxConns is the number of connections per distinct
	// database URL (--database-max-conns): the most DDL sessions the
	// operator opens against one PostgreSQL, whatever the worker count.
	DefaultDatabaseMaxConns = 4
)

// stripManagedFields is the cache's transform: it drops what the operator
// never reads from a cached object before it is stored, which at a thousand
// objects is tens of MiB of the manager's heap. IdempotentConsumers and the
// Secrets' metadata lose all their managedFields. A consumer Deployment keeps
// its metadata, replicas, the pod template's metadata (the config hash) and
// its status, but not the pod spec: the operator compares Deployments by
// its hash annotations and applies the whole desired object, never the
// cached one (slimDeployment). Objects the operator writes are applied or
// patched, never updated from the cache, so what is dropped here is never
// sent back.
func stripManagedFields(in any) (any, error) {
	if dep, ok := in.(*appsv1.Deployment); ok {
		slimDeployment(dep)
		return dep, nil
	}
	obj, err := meta.Accessor(in)
	if err != nil || obj.GetManagedFields() == nil {
		return in, nil //nolint:nilerr // not an object with metadata: stored as it is
	}
	obj.SetManagedFields(nil)
	return in, nil
}

// ownedReplicas is the field set of the operator's apply entry as the cache
// keeps it when that entry owns spec.replicas: all that ownsReplicas reads.
const ownedReplicas = `{"f:spec":{"f:replicas":{}}}`

// slimDeployment keeps of a cached Deployment what the reconciler reads:
// the operator's own apply entry of managedFields (reduced to whether it
// owns spec.replicas, for ownsReplicas when KEDA takes the count over),
// spec.replicas, the template's labels and annotations, and status. The pod
// spec, some KiB per Deployment, is dropped.
func slimDeployment(dep *appsv1.Deployment) {
	var kept []metav1.ManagedFieldsEntry
	for _, mf := range dep.ManagedFields {
		if mf.Manager == FieldOwner && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "" {
			one := metav1.ManagedFieldsEntry{Manager: mf.Manager, Operation: mf.Operation, APIVersion: mf.APIVersion, FieldsType: mf.FieldsType,
				FieldsV1: metav1.NewFieldsV1(`{}`)}
			if ownsReplicas(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{mf}}}) {
				one.FieldsV1 = metav1.NewFieldsV1(ownedReplicas)
			}
			kept = append(kept, one)
		}
	}
	dep.ManagedFields = kept
	dep.Spec.Template.Spec = corev1.PodSpec{}
}
