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
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// TestOutboxRolesAreTakenBack (review finding 5): rotating the relay's role
// (spec.database.relayURLSecretRef, after a leaked credential) and removing
// a role from emitterRoles take back what the former roles were granted on
// the outbox, with a Normal Event; the role kept keeps its grants. Before,
// the former relay role could still read every event and move the cursor,
// the former emitter still emit.
func TestOutboxRolesAreTakenBack(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te, ns, dbURL, admin := outboxOwnerEnv(t)
	ctx := context.Background()
	relay1 := consumertest.NewRole(t, dbURL, "relay1")
	relay2 := consumertest.NewRole(t, dbURL, "relay2")
	gone := consumertest.NewRole(t, dbURL, "goneemitter")
	kept := consumertest.NewRole(t, dbURL, "keptemitter")
	te.secret(t, ns, "db-relay1", map[string]string{"url": relay1.URL})
	te.secret(t, ns, "db-relay2", map[string]string{"url": relay2.URL})
	ob := newOutbox(ns, "rot", []string{"kafka-0.kafka:9092"}, "orders")
	ob.Spec.Database.Schema = "shop"
	ob.Spec.Database.RelayURLSecretRef = &kafkav1alpha1.SecretKeyRef{Name: "db-relay1", Key: "url"}
	ob.Spec.Database.EmitterRoles = []string{gone.Name, kept.Name}
	te.create(t, ob)
	o := te.waitOutbox(t, ns, "rot", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionTrue, kafkav1alpha1.ReasonDatabaseReady)
	if o.Status.RelayRole != relay1.Name || !slices.Equal(o.Status.EmitterRoles, []string{gone.Name, kept.Name}) {
		t.Fatalf("status relayRole %q, emitterRoles %v", o.Status.RelayRole, o.Status.EmitterRoles)
	}
	may := func(role, q string) bool {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(ctx, q, role).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	const (
		selectOutbox = `SELECT has_table_privilege($1, 'shop.rot_outbox', 'SELECT')`
		moveCursor   = `SELECT has_column_privilege($1, 'shop.rot_outbox_relay', 'lo', 'UPDATE')`
		execEmit     = `SELECT has_function_privilege($1, 'shop.rot_outbox_emit(text, bytea, bytea, jsonb, text)', 'EXECUTE')`
		insertTopic  = `SELECT has_column_privilege($1, 'shop.rot_outbox', 'topic', 'INSERT')`
	)
	if !may(relay1.Name, selectOutbox) || !may(gone.Name, execEmit) {
		t.Fatal("the first roles were not granted")
	}

	if err := te.updateOutbox(t, ns, "rot", func(o *kafkav1alpha1.Outbox) {
		o.Spec.Database.RelayURLSecretRef = &kafkav1alpha1.SecretKeyRef{Name: "db-relay2", Key: "url"}
		o.Spec.Database.EmitterRoles = []string{kept.Name}
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the former roles' privileges taken back", func() (bool, string) {
		o := te.getOutbox(t, ns, "rot")
		st := fmt.Sprintf("relayRole %q emitterRoles %v; %s", o.Status.RelayRole, o.Status.EmitterRoles, outboxConditions(o))
		if o.Status.RelayRole != relay2.Name || !slices.Equal(o.Status.EmitterRoles, []string{kept.Name}) {
			return false, st
		}
		return !may(relay1.Name, selectOutbox) && !may(relay1.Name, moveCursor) && !may(gone.Name, execEmit) && !may(gone.Name, insertTopic), st
	})
	for _, c := range []struct {
		what, role, q string
	}{{"new relay SELECT", relay2.Name, selectOutbox}, {"new relay cursor", relay2.Name, moveCursor},
		{"kept emitter EXECUTE", kept.Name, execEmit}, {"kept emitter INSERT", kept.Name, insertTopic}} {
		if !may(c.role, c.q) {
			t.Errorf("%s: taken back too", c.what)
		}
	}
	eventually(t, 10*time.Second, "a Normal Event "+ReasonOutboxRoleRevoked, func() (bool, string) {
		evs := te.eventsOf(t, ns, "Outbox", "rot")
		return hasEvent(evs, ReasonOutboxRoleRevoked), fmt.Sprintf("%d events", len(evs))
	})
}
