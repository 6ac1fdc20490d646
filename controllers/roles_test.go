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
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// TestDatabaseRoles: with spec.database.consumerURLSecretRef the consumer
// Deployment gets that Secret (and never the owner's URL), the operator
// grants the consumer's role its privileges and group policy on the table
// (DatabaseRoles=True), takes them back from the previous role when the
// Secret names another one and when the field is removed (SingleRole), and
// reports a missing role, a URL for another database and a URL of the
// owner's own role.
func TestDatabaseRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{})
	ctx := context.Background()
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	owner := consumertest.NewRole(t, dbURL, "operator")
	first := consumertest.NewRole(t, dbURL, "consumer")
	second := consumertest.NewRole(t, dbURL, "consumer")
	admin := pgConn(t, dbURL)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA shop AUTHORIZATION "+pgx.Identifier{owner.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	te.secret(t, ns, "db", map[string]string{"url": owner.URL})
	te.secret(t, ns, "db-consumer", map[string]string{"url": first.URL})
	inShop := func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.Schema = "shop" }
	consumerRef := func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Database.ConsumerURLSecretRef = &kafkav1alpha1.SecretKeyRef{Name: "db-consumer", Key: "url"}
	}
	may := func(role, table, priv string) bool {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(ctx, `SELECT has_table_privilege($1, $2, $3)`, role, table, priv).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	dbEnv := func(name string) *corev1.SecretKeySelector {
		t.Helper()
		dep := te.deployment(t, ns, name+"-consumer")
		for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
			if e.Name == envvars.DatabaseURL {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Fatalf("%s is not from a Secret: %+v", envvars.DatabaseURL, e)
				}
				return e.ValueFrom.SecretKeyRef
			}
		}
		t.Fatalf("no %s in the consumer container", envvars.DatabaseURL)
		return nil
	}

	t.Run("SingleRole", func(t *testing.T) {
		te.create(t, newConsumer(ns, "single", inShop, withTable("single_event")))
		got := te.waitCondition(t, ns, "single", kafkav1alpha1.ConditionDatabaseRoles, metav1.ConditionFalse, kafkav1alpha1.ReasonSingleRole)
		te.waitReady(t, ns, "single")
		c := got.GetCondition(kafkav1alpha1.ConditionDatabaseRoles)
		if !strings.Contains(c.Message, owner.Name) || !strings.Contains(c.Message, "consumerURLSecretRef") {
			t.Errorf("SingleRole message %q does not name the owner's role and the field", c.Message)
		}
		if ref := dbEnv("single"); ref.Name != "db" {
			t.Errorf("single-role consumer gets the URL from %q, want db", ref.Name)
		}
	})

	t.Run("SeparateRoles", func(t *testing.T) {
		te.create(t, newConsumer(ns, "split", inShop, withTable("split_event"), consumerRef))
		got := te.waitCondition(t, ns, "split", kafkav1alpha1.ConditionDatabaseRoles, metav1.ConditionTrue, kafkav1alpha1.ReasonSeparateRoles)
		te.waitReady(t, ns, "split")
		t.Logf("DatabaseRoles: %s", got.GetCondition(kafkav1alpha1.ConditionDatabaseRoles).Message)
		if st := got.Status.ConsumerRole; st == nil || st.Role != first.Name || st.Group != "orders-writer" {
			t.Errorf("status.consumerRole = %+v, want %s / orders-writer", st, first.Name)
		}
		if ref := dbEnv("split"); ref.Name != "db-consumer" || ref.Key != "url" {
			t.Errorf("the consumer gets the URL from %s/%s, want db-consumer/url", ref.Name, ref.Key)
		}
		// The owner's URL reaches no container and no volume of the pod.
		pod := te.deployment(t, ns, "split-consumer").Spec.Template.Spec
		for _, c := range pod.Containers {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "db" {
					t.Errorf("container %s gets %s from the owner's Secret", c.Name, e.Name)
				}
			}
		}
		for _, v := range pod.Volumes {
			if v.Secret != nil && v.Secret.SecretName == "db" {
				t.Errorf("volume %s mounts the owner's Secret", v.Name)
			}
		}
		for _, priv := range []string{"SELECT", "INSERT", "DELETE"} {
			if !may(first.Name, "shop.split_event", priv) {
				t.Errorf("the consumer's role lacks %s on the table", priv)
			}
		}
		for _, priv := range []string{"TRUNCATE", "UPDATE"} {
			if may(first.Name, "shop.split_event", priv) {
				t.Errorf("the consumer's role has %s on the table", priv)
			}
		}
		conn := pgConn(t, first.URL)
		if _, err := conn.Exec(ctx, `DROP TABLE shop.split_event`); err == nil || !strings.Contains(err.Error(), "42501") {
			t.Errorf("DROP TABLE as the consumer's role: %v, want SQLSTATE 42501", err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO shop.split_event (event_id, consumer_group) VALUES ($1, 'another-group')`, uuid.Must(uuid.NewV7())); err == nil || !strings.Contains(err.Error(), "42501") {
			t.Errorf("a row of another group as the consumer's role: %v, want SQLSTATE 42501", err)
		}
	})

	t.Run("RoleChanges", func(t *testing.T) {
		te.setSecret(t, ns, "db-consumer", map[string]string{"url": second.URL})
		eventually(t, 30*time.Second, "the grant to move to the second role", func() (bool, string) {
			got := te.get(t, ns, "split")
			st := got.Status.ConsumerRole
			return st != nil && st.Role == second.Name, conditionsSummary(got)
		})
		if may(first.Name, "shop.split_event", "INSERT") || may(first.Name, "shop.split_event_offsets", "UPDATE") {
			t.Error("the first role kept its privileges after the Secret named the second")
		}
		if !may(second.Name, "shop.split_event", "INSERT") {
			t.Error("the second role was not granted")
		}
		revoked := false
		for _, ev := range te.events(t, ns, "split") {
			revoked = revoked || ev.Reason == EventConsumerRoleRevoked
		}
		if !revoked {
			t.Errorf("no %s Event", EventConsumerRoleRevoked)
		}

		if err := te.update(t, ns, "split", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.ConsumerURLSecretRef = nil }); err != nil {
			t.Fatal(err)
		}
		got := te.waitCondition(t, ns, "split", kafkav1alpha1.ConditionDatabaseRoles, metav1.ConditionFalse, kafkav1alpha1.ReasonSingleRole)
		if got.Status.ConsumerRole != nil {
			t.Errorf("status.consumerRole = %+v after the field was removed", got.Status.ConsumerRole)
		}
		if may(second.Name, "shop.split_event", "INSERT") {
			t.Error("the second role kept its privileges after the field was removed")
		}
		if ref := dbEnv("split"); ref.Name != "db" {
			t.Errorf("without the field the consumer gets the URL from %q, want db", ref.Name)
		}
	})

	t.Run("BadConsumerURLs", func(t *testing.T) {
		u, err := url.Parse(first.URL)
		if err != nil {
			t.Fatal(err)
		}
		noRole := *u
		noRole.User = url.UserPassword("nobody_"+randSuffix(), "x")
		otherDB := *u
		otherDB.Path = "/another_database"
		for _, c := range []struct {
			name, url, reason, says string
		}{
			{"missing", noRole.String(), kafkav1alpha1.ReasonConsumerRoleNotFound, "does not exist"},
			{"otherdb", otherDB.String(), kafkav1alpha1.ReasonInvalidConsumerURL, "same database"},
			{"owner", owner.URL, kafkav1alpha1.ReasonConsumerRoleUnrestricted, "owns the table"},
		} {
			te.secret(t, ns, "db-"+c.name, map[string]string{"url": c.url})
			te.create(t, newConsumer(ns, c.name, inShop, withTable(c.name+"_event"), func(o *kafkav1alpha1.IdempotentConsumer) {
				o.Spec.Database.ConsumerURLSecretRef = &kafkav1alpha1.SecretKeyRef{Name: "db-" + c.name, Key: "url"}
			}))
			got := te.waitCondition(t, ns, c.name, kafkav1alpha1.ConditionDatabaseRoles, metav1.ConditionFalse, c.reason)
			msg := got.GetCondition(kafkav1alpha1.ConditionDatabaseRoles).Message
			t.Logf("%s: %s", c.name, msg)
			if !strings.Contains(msg, c.says) {
				t.Errorf("%s: message %q does not say %q", c.name, msg, c.says)
			}
			for _, pw := range []string{owner.URL, first.URL, "x@"} {
				if strings.Contains(msg, pw) {
					t.Errorf("%s: the message quotes a URL", c.name)
				}
			}
		}
	})
}
