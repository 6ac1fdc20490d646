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
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestAdoption: an object deleted with Retain and created again (a new UID)
// is refused its own old table until spec.database.adoptFromUID names the
// old UID; then it takes the table over with its rows, records an Event, and
// becomes Ready. A wrong UID, and the UID of an object that still exists,
// are refused with messages that say so.
func TestAdoption(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{})
	ctx := context.Background()

	t.Run("RecreatedObject", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := consumertest.DatabaseURL(t)
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		te.create(t, newConsumer(ns, "orders"))
		a := te.waitReady(t, ns, "orders")
		oldUID := string(a.UID)

		conn := pgConn(t, dbURL)
		id := dedup.BoundaryUUID(te.clock.Now())
		if _, err := conn.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, 'orders-writer')`, id); err != nil {
			t.Fatal(err)
		}
		parts := partitions(t, conn, "public", "processed_event")

		if err := te.c.Delete(ctx, a); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the first object gone", func() (bool, string) {
			err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders"}, &kafkav1alpha1.IdempotentConsumer{})
			return apierrors.IsNotFound(err), ""
		})
		// envtest runs no garbage collector: remove the old object's
		// Deployment as the cluster's would.
		// A reconcile of the old object already under way when it was
		// deleted may still write its Deployment after a first delete, so
		// delete until it has stayed gone for a second.
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-consumer"}}
		var goneSince time.Time
		eventually(t, 30*time.Second, "the old Deployment gone for good", func() (bool, string) {
			err := te.c.Get(ctx, client.ObjectKeyFromObject(dep), &appsv1.Deployment{})
			switch {
			case apierrors.IsNotFound(err):
				if goneSince.IsZero() {
					goneSince = time.Now()
				}
				return time.Since(goneSince) > time.Second, ""
			case err != nil:
				return false, err.Error()
			}
			goneSince = time.Time{}
			if err := te.c.Delete(ctx, dep); client.IgnoreNotFound(err) != nil {
				return false, err.Error()
			}
			return false, "deleted; waiting"
		})

		// Created again: same spec, new UID. Refused, and told how to adopt.
		te.create(t, newConsumer(ns, "orders"))
		b := te.waitCondition(t, ns, "orders", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableClaimed)
		if string(b.UID) == oldUID {
			t.Fatal("the object kept its UID")
		}
		assertSummary(t, b, kafkav1alpha1.ReasonTableClaimed, true)
		msg := b.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message
		if !strings.Contains(msg, oldUID) || !strings.Contains(msg, "adoptFromUID") {
			t.Errorf("message %q does not name the old UID and adoptFromUID", msg)
		}

		// A wrong UID: still refused, and the message says it does not match.
		wrong := "0f0f0f0f-1111-2222-3333-444444444444"
		if err := te.update(t, ns, "orders", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.AdoptFromUID = wrong }); err != nil {
			t.Fatal(err)
		}
		b = te.waitCondition(t, ns, "orders", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableClaimed)
		msg = b.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message
		if !strings.Contains(msg, oldUID) || !strings.Contains(msg, wrong) || !strings.Contains(msg, "does not match") {
			t.Errorf("message %q does not name both UIDs and say they do not match", msg)
		}
		if owner := tableOwner(t, conn, "processed_event"); owner != oldUID {
			t.Fatalf("a refused adoption changed the marker to %q", owner)
		}
		if hasEvent(te.events(t, ns, "orders"), ReasonTableAdopted) {
			t.Fatal("TableAdopted Event for a refused adoption")
		}

		// The right UID (mutable field): adopted, Ready, the rows kept.
		if err := te.update(t, ns, "orders", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.AdoptFromUID = oldUID }); err != nil {
			t.Fatal(err)
		}
		b = te.waitReady(t, ns, "orders")
		newUID := string(b.UID)
		if owner := tableOwner(t, conn, "processed_event"); owner != newUID {
			t.Fatalf("marker names %q after adoption, want %q", owner, newUID)
		}
		for _, p := range parts {
			if owner := tableOwner(t, conn, p); owner != newUID {
				t.Errorf("partition %s is marked for %q, want %q", p, owner, newUID)
			}
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = $1`, id).Scan(&n); err != nil || n != 1 {
			t.Fatalf("the row inserted before the adoption: count %d, err %v", n, err)
		}
		adopted := eventsWithReason(te, t, ns, "orders", ReasonTableAdopted)
		if len(adopted) != 1 || !strings.Contains(adopted[0], oldUID) {
			t.Fatalf("TableAdopted Events %q, want one naming %s", adopted, oldUID)
		}

		// Left in place the field is a no-op: a spec change (a new
		// generation, so a reconcile with the field set) adopts nothing
		// again; removed, nothing changes either.
		if err := te.update(t, ns, "orders", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.Replicas = ptr.To[int32](2) }); err != nil {
			t.Fatal(err)
		}
		te.waitReady(t, ns, "orders")
		if err := te.update(t, ns, "orders", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.AdoptFromUID = "" }); err != nil {
			t.Fatal(err)
		}
		te.waitReady(t, ns, "orders")
		if got := eventsWithReason(te, t, ns, "orders", ReasonTableAdopted); len(got) != 1 {
			t.Fatalf("%d TableAdopted Events, want 1: %q", len(got), got)
		}
		if owner := tableOwner(t, conn, "processed_event"); owner != newUID {
			t.Fatalf("marker names %q, want %q", owner, newUID)
		}
	})

	t.Run("OwnerStillExists", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := consumertest.DatabaseURL(t)
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		te.create(t, newConsumer(ns, "owner"))
		owner := te.waitReady(t, ns, "owner")
		te.create(t, newConsumer(ns, "taker", func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Database.AdoptFromUID = string(owner.UID)
		}))
		got := te.waitCondition(t, ns, "taker", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableClaimed)
		assertSummary(t, got, kafkav1alpha1.ReasonTableClaimed, true)
		msg := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message
		if !strings.Contains(msg, ns+"/owner") || !strings.Contains(msg, "still exists") {
			t.Errorf("message %q does not say the object with that UID still exists", msg)
		}
		if o := tableOwner(t, pgConn(t, dbURL), "processed_event"); o != string(owner.UID) {
			t.Fatalf("the live owner's table was taken: marker names %q", o)
		}
		if !te.get(t, ns, "owner").IsReady() {
			t.Error("the owner lost Ready")
		}
	})

	t.Run("UnmarkedTableIsNotAdopted", func(t *testing.T) {
		ns := te.namespace(t)
		dbURL := consumertest.DatabaseURL(t)
		conn := pgConn(t, dbURL)
		if _, err := conn.Exec(ctx, `CREATE TABLE processed_event (event_id uuid NOT NULL, consumer_group text NOT NULL,
			processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (event_id, consumer_group)) PARTITION BY RANGE (event_id)`); err != nil {
			t.Fatal(err)
		}
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		te.create(t, newConsumer(ns, "c", func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Database.AdoptFromUID = "3f6c1a52-0d4e-4a57-9b1e-6f0a2c9d8e71"
		}))
		got := te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableNotOwned)
		if msg := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message; !strings.Contains(msg, "adoptFromUID") {
			t.Errorf("message %q does not explain that adoptFromUID does not apply", msg)
		}
		if o := tableOwner(t, conn, "processed_event"); o != "" {
			t.Fatalf("the unmarked table got a marker naming %q", o)
		}
	})

	t.Run("InvalidUIDRejected", func(t *testing.T) {
		ns := te.namespace(t)
		for _, bad := range []string{"has space", "-leading-dash", "quote'", strings.Repeat("a", 254)} {
			obj := newConsumer(ns, "bad-"+randSuffix(), func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.AdoptFromUID = bad })
			err := te.c.Create(ctx, obj)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "adoptFromUID") {
				t.Errorf("adoptFromUID %q: %v, want Invalid naming the field", bad, err)
			}
		}
	})
}

// tableOwner is the owner named in a table's marker ("" for none).
func tableOwner(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	var comment *string
	if err := conn.QueryRow(context.Background(), `SELECT obj_description(to_regclass($1), 'pg_class')`,
		pgx.Identifier{"public", table}.Sanitize()).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	if comment == nil {
		return ""
	}
	var m struct {
		Owner string `json:"idempotency.dev/owner"`
	}
	if err := json.Unmarshal([]byte(*comment), &m); err != nil {
		t.Fatalf("comment on %s is not a marker: %q", table, *comment)
	}
	return m.Owner
}

// eventsWithReason lists the notes of the object's Events with reason.
func eventsWithReason(te *testEnv, t *testing.T, ns, name, reason string) []string {
	t.Helper()
	var out []string
	for _, e := range te.events(t, ns, name) {
		if e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}
