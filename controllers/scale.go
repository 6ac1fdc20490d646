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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The defaults that decide how fast a large cluster becomes Ready. A new
// object's first reconcile is mostly waiting: about 25 DDL transactions
// (table, positions table, then CREATE and ATTACH for each partition of the
// retention window and the premade ones), each ending in a WAL flush, and a
// handful of API calls. Reconciles of different objects are independent
// (each table has its own advisory lock), so they run side by side; the
// number of connections per database URL, not the number of workers, bounds
// what one database sees. See docs/scaling.md for the measurements.
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

// stripManagedFields is the cache's transform: it drops the managedFields the
// operator never reads before an object is stored, which at a thousand
// objects is several MiB of the manager's heap. IdempotentConsumers and the
// Secrets' metadata lose all of them; a Deployment keeps only the operator's
// own apply entry, which ownsReplicas reads when KEDA takes the replica count
// over. Objects the operator writes are applied or patched, never updated
// from the cache, so what is dropped here is never sent back.
func stripManagedFields(in any) (any, error) {
	obj, err := meta.Accessor(in)
	if err != nil || obj.GetManagedFields() == nil {
		return in, nil //nolint:nilerr // not an object with metadata: stored as it is
	}
	if _, ok := in.(*appsv1.Deployment); ok {
		var kept []metav1.ManagedFieldsEntry
		for _, mf := range obj.GetManagedFields() {
			if mf.Manager == FieldOwner && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "" {
				kept = append(kept, mf)
			}
		}
		obj.SetManagedFields(kept)
		return in, nil
	}
	obj.SetManagedFields(nil)
	return in, nil
}
