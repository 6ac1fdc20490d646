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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// TestDeleteWithoutSecret: an object with deletionPolicy Delete whose
// database URL Secret is gone cannot drop its table; its deletion must
// finish anyway (keeping the table, and saying so), or it would block the
// deletion of its namespace for good.
func TestDeleteWithoutSecret(t *testing.T) {
	te := startEnv(t, envOptions{})
	ctx := context.Background()

	// ready creates a Ready object with deletionPolicy Delete on its own
	// table, and returns the database URL.
	ready := func(t *testing.T, ns, name, table string) string {
		dbURL := consumertest.DatabaseURL(t)
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		te.create(t, newConsumer(ns, name, withTable(table), withDeletionPolicy(kafkav1alpha1.DeletionDelete)))
		te.waitReady(t, ns, name)
		return dbURL
	}
	deleteSecret := func(t *testing.T, ns string) {
		if err := te.c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}}); err != nil {
			t.Fatal(err)
		}
	}
	deleteAndWaitGone := func(t *testing.T, ns, name string) {
		if err := te.c.Delete(ctx, te.get(t, ns, name)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, ns+"/"+name+" gone", func() (bool, string) {
			obj := &kafkav1alpha1.IdempotentConsumer{}
			err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			return false, conditionsSummary(obj)
		})
	}

	t.Run("SecretGone", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := ready(t, ns, "orphan", "orphan_event")
		deleteSecret(t, ns)
		deleteAndWaitGone(t, ns, "orphan")

		te.hasEvents(t, ns, "orphan", ReasonTableKept) // written asynchronously
		var kept bool
		for _, e := range te.events(t, ns, "orphan") {
			if e.Reason == ReasonTableKept {
				kept = true
				if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "public.orphan_event") || !strings.Contains(e.Note, `Secret "db" not found`) {
					t.Errorf("TableKept Event: type %s, note %q; want a Warning naming the table and the missing Secret", e.Type, e.Note)
				}
			}
		}
		if !kept {
			t.Errorf("no %s Event for the kept table", ReasonTableKept)
		}
		if conn := pgConn(t, dbURL); !tableExists(t, conn, "public", "orphan_event") {
			t.Error("the table is gone; it should have been kept")
		}
	})

	// The database is down when the object is deleted: it waits (the Secret
	// is there, the drop may still succeed), until the Secret goes too, as
	// it does when the whole namespace is deleted.
	t.Run("DatabaseDownThenSecretGone", func(t *testing.T) {
		own, err := consumertest.StartPostgres()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = own.Stop() })
		ns := te.namespace(t)
		te.secret(t, ns, "db", map[string]string{"url": own.URL("postgres")})
		te.create(t, newConsumer(ns, "waiting", withDeletionPolicy(kafkav1alpha1.DeletionDelete)))
		te.waitReady(t, ns, "waiting")
		if err := own.StopServer(); err != nil {
			t.Fatal(err)
		}
		if err := te.c.Delete(ctx, te.get(t, ns, "waiting")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "Ready=False/Deleting", func() (bool, string) {
			got := te.get(t, ns, "waiting")
			c := got.GetCondition(kafkav1alpha1.ConditionReady)
			return c != nil && c.Reason == kafkav1alpha1.ReasonDeleting, conditionsSummary(got)
		})
		deleteSecret(t, ns)
		eventually(t, 30*time.Second, ns+"/waiting gone", func() (bool, string) {
			err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "waiting"}, &kafkav1alpha1.IdempotentConsumer{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if !te.hasEvents(t, ns, "waiting", ReasonTableKept) {
			t.Errorf("no %s Event", ReasonTableKept)
		}
	})

	// Deleting a namespace: the namespace controller deletes the objects in
	// it, in no particular order, and refuses new ones (Events included).
	// envtest runs no namespace controller, so the test deletes the
	// namespace (which stays Terminating) and then the Secret and the
	// object itself, as that controller would.
	t.Run("NamespaceTerminating", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := ready(t, ns, "doomed", "doomed_event")
		if err := te.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "namespace Terminating", func() (bool, string) {
			got := &corev1.Namespace{}
			if err := te.c.Get(ctx, types.NamespacedName{Name: ns}, got); err != nil {
				return false, err.Error()
			}
			return got.Status.Phase == corev1.NamespaceTerminating, string(got.Status.Phase)
		})
		deleteSecret(t, ns)
		deleteAndWaitGone(t, ns, "doomed")
		// The API server refuses Events in a terminating namespace; the
		// operator's log is where the kept table is named.
		eventually(t, 10*time.Second, "the kept table in the operator's log", func() (bool, string) {
			return strings.Contains(te.logs.String(), "doomed_event"), ""
		})
		if conn := pgConn(t, dbURL); !tableExists(t, conn, "public", "doomed_event") {
			t.Error("the table is gone; it should have been kept")
		}
	})
}
