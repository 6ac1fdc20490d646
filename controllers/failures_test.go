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
	"net/url"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// testFailures drives each failure into its condition reason, fixes it, and
// checks recovery; no log line, Event or condition may carry a password.
func testFailures(t *testing.T, te *testEnv) {
	pg := consumertest.SharedPostgres(t)
	var password string
	if pg != nil {
		password = pg.Password()
	}
	wrongPassword := "wrong-" + randSuffix() + "-pw"

	t.Run("MissingSecret", func(t *testing.T) {
		ns := te.namespace(t)
		te.create(t, newConsumer(ns, "c"))
		got := te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSecretNotFound)
		assertSummary(t, got, kafkav1alpha1.ReasonSecretNotFound, true)
		te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
		te.waitReady(t, ns, "c")
		assertNoSecretLeak(t, te, ns, password)
	})

	t.Run("MissingKey", func(t *testing.T) {
		ns := te.namespace(t)
		te.secret(t, ns, "db", map[string]string{"uri": "postgres://nobody@127.0.0.1:1/x"})
		te.create(t, newConsumer(ns, "c"))
		te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSecretKeyMissing)
		te.setSecret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
		te.waitReady(t, ns, "c")
	})

	t.Run("InvalidURL", func(t *testing.T) {
		ns := te.namespace(t)
		bad := "postgres://user:" + wrongPassword + "@127.0.0.1:notaport/db"
		te.secret(t, ns, "db", map[string]string{"url": bad})
		te.create(t, newConsumer(ns, "c"))
		te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonInvalidURL)
		te.setSecret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
		te.waitReady(t, ns, "c")
		assertNoSecretLeak(t, te, ns, wrongPassword, bad)
	})

	t.Run("TransactionPooler", func(t *testing.T) {
		// The operator's URL through PgBouncer in transaction mode: refused
		// before any DDL, with the reason that names the fix; the direct
		// URL then makes it Ready.
		ns := te.namespace(t)
		direct := consumertest.DatabaseURL(t)
		te.secret(t, ns, "db", map[string]string{"url": consumertest.StartPgBouncer(t, direct)})
		te.create(t, newConsumer(ns, "c"))
		got := te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTransactionPooler)
		if c := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady); !strings.Contains(c.Message, "consumerURLSecretRef") {
			t.Errorf("DatabaseReady message %q does not name the fix", c.Message)
		}
		conn := pgConn(t, direct)
		if tableExists(t, conn, "public", "processed_event") {
			t.Error("the table was created through the transaction pooler")
		}
		te.setSecret(t, ns, "db", map[string]string{"url": direct})
		te.waitReady(t, ns, "c")
	})

	t.Run("WrongPassword", func(t *testing.T) {
		ns := te.namespace(t)
		good := consumertest.DatabaseURL(t)
		u, _ := url.Parse(good)
		u.User = url.UserPassword(u.User.Username(), wrongPassword)
		te.secret(t, ns, "db", map[string]string{"url": u.String()})
		te.create(t, newConsumer(ns, "c"))
		got := te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonAuthenticationFailed)
		assertSummary(t, got, kafkav1alpha1.ReasonAuthenticationFailed, true)
		te.setSecret(t, ns, "db", map[string]string{"url": good})
		te.waitReady(t, ns, "c")
		// The failure was logged (so the leak check below looks at real lines).
		if !strings.Contains(te.logs.String(), kafkav1alpha1.ReasonAuthenticationFailed) {
			t.Error("the authentication failure was not logged")
		}
		assertNoSecretLeak(t, te, ns, password, wrongPassword)
	})

	t.Run("DatabaseDown", func(t *testing.T) {
		// A cluster of its own, so stopping it does not disturb other tests.
		own, err := consumertest.StartPostgres()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = own.Stop() })
		ns := te.namespace(t)
		te.secret(t, ns, "db", map[string]string{"url": own.URL("postgres")})
		te.create(t, newConsumer(ns, "c"))
		te.waitReady(t, ns, "c")

		if err := own.StopServer(); err != nil {
			t.Fatal(err)
		}
		te.poke(t, ns, "c")
		got := te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDatabaseUnreachable)
		assertSummary(t, got, kafkav1alpha1.ReasonDatabaseUnreachable, false)
		if c := got.GetCondition(kafkav1alpha1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("a database outage should be Reconciling (retrying), got %+v", c)
		}
		// The Deployment keeps running through the outage.
		if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "c-consumer"}, &appsv1.Deployment{}); err != nil {
			t.Errorf("Deployment gone during the outage: %v", err)
		}
		if err := own.Start(); err != nil {
			t.Fatal(err)
		}
		// No poke: the retry backoff brings it back by itself.
		te.waitReady(t, ns, "c")
		assertNoSecretLeak(t, te, ns, own.Password())
	})

	t.Run("ForeignTable", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := consumertest.DatabaseURL(t)
		conn := pgConn(t, dbURL)
		if _, err := conn.Exec(context.Background(), `CREATE TABLE processed_event (event_id uuid PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		te.create(t, newConsumer(ns, "c"))
		got := te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableNotOwned)
		assertSummary(t, got, kafkav1alpha1.ReasonTableNotOwned, true)
		if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "c-consumer"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Errorf("a consumer Deployment was created for a table that is not ours: %v", err)
		}
		if !tableExists(t, conn, "public", "processed_event") || len(partitions(t, conn, "public", "processed_event")) != 0 {
			t.Error("the foreign table was changed")
		}
		// Fixed in the database (the foreign table and its primary key index
		// renamed away; the index keeps its name otherwise and would collide
		// with the new table's): recovers on retry.
		if _, err := conn.Exec(context.Background(), `ALTER TABLE processed_event RENAME TO legacy_processed_event;
			ALTER INDEX processed_event_pkey RENAME TO legacy_processed_event_pkey`); err != nil {
			t.Fatal(err)
		}
		te.waitReady(t, ns, "c")
	})

	t.Run("TwoObjectsOneTable", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := consumertest.DatabaseURL(t)
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		te.create(t, newConsumer(ns, "first", withDeletionPolicy(kafkav1alpha1.DeletionDelete)))
		te.waitReady(t, ns, "first")
		te.create(t, newConsumer(ns, "second"))
		got := te.waitCondition(t, ns, "second", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableClaimed)
		assertSummary(t, got, kafkav1alpha1.ReasonTableClaimed, true)
		if msg := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message; !strings.Contains(msg, ns+"/first") {
			t.Errorf("message %q does not name the owning object", msg)
		}
		if te.get(t, ns, "first").IsReady() == false {
			t.Error("the first object lost Ready because of the second")
		}
		// The first object goes away and takes its table along: the second
		// then creates its own.
		if err := te.c.Delete(context.Background(), te.get(t, ns, "first")); err != nil {
			t.Fatal(err)
		}
		te.waitReady(t, ns, "second")
		assertNoSecretLeak(t, te, ns, password)
	})
}

// assertSummary checks that Ready carries the failure's reason, and that
// Stalled (no retry can fix it) or Reconciling (retrying) says which.
func assertSummary(t *testing.T, obj *kafkav1alpha1.IdempotentConsumer, reason string, stalled bool) {
	t.Helper()
	ready := obj.GetCondition(kafkav1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != reason || ready.Message == "" {
		t.Errorf("Ready = %+v, want False/%s with a message", ready, reason)
	}
	want, other := kafkav1alpha1.ConditionReconciling, kafkav1alpha1.ConditionStalled
	if stalled {
		want, other = other, want
	}
	if c := obj.GetCondition(want); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("%s = %+v, want True", want, c)
	}
	if c := obj.GetCondition(other); c != nil {
		t.Errorf("%s = %+v, want absent", other, c)
	}
}

func testDeletion(t *testing.T, te *testEnv) {
	ctx := context.Background()
	t.Run("Retain", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := consumertest.DatabaseURL(t)
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		obj := newConsumer(ns, "keep")
		te.create(t, obj)
		got := te.waitReady(t, ns, "keep")
		if len(got.Finalizers) != 0 {
			t.Errorf("Retain needs no finalizer, got %v", got.Finalizers)
		}
		waitConditionSeries(t, ns, "keep", kafkav1alpha1.ConditionReady, metav1.ConditionTrue)
		if err := te.c.Delete(ctx, got); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "object gone", func() (bool, string) {
			err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "keep"}, &kafkav1alpha1.IdempotentConsumer{})
			return apierrors.IsNotFound(err), ""
		})
		// No finalizer: the reconcile that finds the object gone drops its series.
		waitNoSeries(t, ns, "keep")
		conn := pgConn(t, dbURL)
		if !tableExists(t, conn, "public", "processed_event") || len(partitions(t, conn, "public", "processed_event")) == 0 {
			t.Error("Retain: the table or its partitions are gone")
		}
	})

	t.Run("Delete", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := consumertest.DatabaseURL(t)
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		te.create(t, newConsumer(ns, "drop", withDeletionPolicy(kafkav1alpha1.DeletionDelete)))
		got := te.waitReady(t, ns, "drop")
		if len(got.Finalizers) != 1 || got.Finalizers[0] != Finalizer {
			t.Errorf("finalizers = %v, want [%s]", got.Finalizers, Finalizer)
		}
		waitConditionSeries(t, ns, "drop", kafkav1alpha1.ConditionReady, metav1.ConditionTrue)
		if err := te.c.Delete(ctx, got); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "object gone", func() (bool, string) {
			err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "drop"}, &kafkav1alpha1.IdempotentConsumer{})
			return apierrors.IsNotFound(err), ""
		})
		// Removing the finalizer drops the series.
		waitNoSeries(t, ns, "drop")
		conn := pgConn(t, dbURL)
		if tableExists(t, conn, "public", "processed_event") {
			t.Error("Delete: the table is still there")
		}
		if rest := partitions(t, conn, "public", "processed_event"); len(rest) != 0 {
			t.Errorf("Delete: partitions left: %v", rest)
		}
	})

	t.Run("DeleteWaitsForDatabaseThenRetainReleases", func(t *testing.T) {
		own, err := consumertest.StartPostgres()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = own.Stop() })
		ns := te.namespace(t)
		te.secret(t, ns, "db", map[string]string{"url": own.URL("postgres")})
		te.create(t, newConsumer(ns, "stuck", withDeletionPolicy(kafkav1alpha1.DeletionDelete)))
		got := te.waitReady(t, ns, "stuck")
		if err := own.StopServer(); err != nil {
			t.Fatal(err)
		}
		if err := te.c.Delete(ctx, got); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "Ready=False/Deleting", func() (bool, string) {
			got = te.get(t, ns, "stuck")
			c := got.GetCondition(kafkav1alpha1.ConditionReady)
			return c != nil && c.Reason == kafkav1alpha1.ReasonDeleting, conditionsSummary(got)
		})
		waitConditionSeries(t, ns, "stuck", kafkav1alpha1.ConditionReady, metav1.ConditionFalse)
		if err := te.update(t, ns, "stuck", func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.DeletionPolicy = kafkav1alpha1.DeletionRetain
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "object released", func() (bool, string) {
			err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "stuck"}, &kafkav1alpha1.IdempotentConsumer{})
			return apierrors.IsNotFound(err), ""
		})
		assertNoSecretLeak(t, te, ns, own.Password())
	})

	t.Run("DeleteLeavesAnotherOwnersTable", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := consumertest.DatabaseURL(t)
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		te.create(t, newConsumer(ns, "owner"))
		te.waitReady(t, ns, "owner")
		te.create(t, newConsumer(ns, "intruder", withDeletionPolicy(kafkav1alpha1.DeletionDelete)))
		got := te.waitCondition(t, ns, "intruder", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableClaimed)
		if err := te.c.Delete(ctx, got); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "intruder gone", func() (bool, string) {
			err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "intruder"}, &kafkav1alpha1.IdempotentConsumer{})
			return apierrors.IsNotFound(err), ""
		})
		if !tableExists(t, pgConn(t, dbURL), "public", "processed_event") {
			t.Error("deleting an object dropped a table it did not own")
		}
		if !te.hasEvents(t, ns, "intruder", kafkav1alpha1.ReasonTableNotOwned) {
			t.Error("no TableNotOwned Event on deletion")
		}
	})
}

func testSuspend(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	te.create(t, newConsumer(ns, "s", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Suspend = true }))
	te.waitCondition(t, ns, "s", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSuspended)
	if tableExists(t, pgConn(t, dbURL), "public", "processed_event") {
		t.Error("a suspended object created its table")
	}
	if err := te.update(t, ns, "s", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Suspend = false }); err != nil {
		t.Fatal(err)
	}
	te.waitReady(t, ns, "s")
}

// waitConditionSeries waits until the object's status_condition series say
// the condition has that status: 1 on it, 0 on the other two.
func waitConditionSeries(t testing.TB, ns, name, condType string, status metav1.ConditionStatus) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%s{%s/%s, %s=%s} = 1", MetricStatusCondition, ns, name, condType, status), func() (bool, string) {
		got := conditionSeries(t, ns, name)
		for _, st := range conditionStatuses {
			want := 0.0
			if st == status {
				want = 1
			}
			if v, ok := got[condType+"/"+string(st)]; !ok || v != want {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
}

// waitNoSeries waits until no operator series names the object.
func waitNoSeries(t testing.TB, ns, name string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("no series of %s/%s", ns, name), func() (bool, string) {
		families, err := objectSeries(ns, name).Gather()
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, f := range families {
			left = append(left, fmt.Sprintf("%s (%d)", f.GetName(), len(f.GetMetric())))
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}
