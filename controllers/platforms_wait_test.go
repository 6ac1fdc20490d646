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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// TestPlatformsKafkaWaitKeepsTheDatabase: an IdempotentConsumer on
// CloudNativePG (with a consumerRole) and Strimzi whose KafkaUser is not
// Ready (before the User Operator's first apply, and while it cannot reach
// the brokers) waits only on the Kafka side: the dedup table is made and
// kept, the consumer role granted, the derived Secret holds the consumer's
// URL and the SCRAM username, and no Deployment is made. Suspended, it says
// Suspended, not the wait. (Before, the wait held every phase: no table, no
// grants, no partition maintenance for other writers of the table, and a
// suspended object kept saying KafkaUserNotReady.)
func TestPlatformsKafkaWaitKeepsTheDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te, ns, ca := strimziEnv(t, envOptions{})
	pg, err := consumertest.StartPostgres(consumertest.WithTLS(ca, "localhost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	ctx := context.Background()
	conn := pgConn(t, pg.URL("postgres"))
	if _, err := conn.Exec(ctx, `CREATE ROLE waiting_consumer LOGIN PASSWORD 'role-pw'`); err != nil {
		t.Fatal(err)
	}
	te.platformObject(t, cnpgClusterGVK, ns, "pg", map[string]any{"instances": int64(1)}, map[string]any{"writeService": "pg-rw"})
	te.secret(t, ns, "pg-app", map[string]string{
		"uri": pg.TLSURL("postgres", "localhost", ""), "host": "localhost", "port": "5432",
		"dbname": "postgres", "username": "app", "password": "not-used",
	})
	te.secret(t, ns, "pg-ca", map[string]string{"ca.crt": ca.PEM})
	te.secret(t, ns, "waiting-role", map[string]string{"username": "waiting_consumer", "password": "role-pw"})

	te.create(t, newConsumer(ns, "w", withCNPG("pg"), withStrimzi("kc"), withTable("waiting_event"), func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Database.CloudNativePG.ConsumerRole = &kafkav1alpha1.CloudNativePGRole{
			Name: "waiting_consumer", SecretRef: kafkav1alpha1.LocalObjectName{Name: "waiting-role"}}
	}))
	te.waitCondition(t, ns, "w", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaUserNotReady)
	te.waitCondition(t, ns, "w", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaUserNotReady)

	eventually(t, 30*time.Second, "the table made and the consumer role granted while the KafkaUser is not Ready", func() (bool, string) {
		var made, granted bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass('public.waiting_event') IS NOT NULL`).Scan(&made); err != nil {
			return false, err.Error()
		}
		if made {
			if err := conn.QueryRow(ctx, `SELECT has_table_privilege('waiting_consumer', 'public.waiting_event', 'INSERT')`).Scan(&granted); err != nil {
				return false, err.Error()
			}
		}
		cur := te.get(t, ns, "w")
		return made && granted && cur.Status.ConsumerRole != nil && cur.Status.ConsumerRole.Role == "waiting_consumer",
			fmt.Sprintf("table %v, granted %v, status.consumerRole %+v; %s", made, granted, cur.Status.ConsumerRole, conditionsSummary(cur))
	})
	var sec corev1.Secret
	if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "w-platform"}, &sec); err != nil {
		t.Fatalf("the derived Secret during the wait: %v", err)
	}
	u, err := url.Parse(string(sec.Data["uri"]))
	if err != nil || u.User.Username() != "waiting_consumer" {
		t.Errorf("derived uri user %v (%v), want waiting_consumer", u, err)
	}
	if got := string(sec.Data["username"]); got != "w" {
		t.Errorf("derived username %q, want the KafkaUser's name w", got)
	}
	err = te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "w-consumer"}, &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("consumer Deployment while the KafkaUser is not Ready: err = %v, want NotFound", err)
	}
	if c := te.get(t, ns, "w").GetCondition(kafkav1alpha1.ConditionReady); !strings.Contains(c.Message, `"w"`) {
		t.Errorf("Ready message %q does not name the KafkaUser", c.Message)
	}

	if err := te.update(t, ns, "w", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Suspend = true }); err != nil {
		t.Fatal(err)
	}
	te.waitCondition(t, ns, "w", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSuspended)
}
