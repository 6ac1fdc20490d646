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
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// TestDatabaseCAEnvtest: with spec.database.caSecretRef the operator
// reaches a PostgreSQL whose certificate a private CA signed (verify-full,
// the URL naming no sslmode), the consumer Deployment mounts the CA and
// points pgx at it; a missing Secret, a value without a certificate and a
// URL with a weaker sslmode are conditions that say so.
func TestDatabaseCAEnvtest(t *testing.T) {
	ca, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := consumertest.StartPostgres(consumertest.WithTLS(ca, "localhost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	te := startEnv(t, envOptions{})
	ns := te.namespace(t)
	dbURL := pg.TLSURL("postgres", "localhost", "")
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	withCA := func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Database.CASecretRef = &kafkav1alpha1.SecretKeyRef{Name: "pg-ca", Key: "ca.crt"}
	}
	te.create(t, newConsumer(ns, "c", withCA))

	got := te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSecretNotFound)
	if c := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady); !strings.Contains(c.Message, "caSecretRef") || !strings.Contains(c.Message, "pg-ca") {
		t.Errorf("missing CA Secret: message %q does not say which Secret", c.Message)
	}
	te.secret(t, ns, "pg-ca", map[string]string{"ca.crt": "not a certificate"})
	got = te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonInvalidDatabaseCA)
	if c := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady); !strings.Contains(c.Message, `"pg-ca"`) {
		t.Errorf("invalid CA: message %q", c.Message)
	}
	te.setSecret(t, ns, "pg-ca", map[string]string{"ca.crt": ca.PEM})
	te.waitReady(t, ns, "c")

	dep := &appsv1.Deployment{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "c-consumer"}, dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	env := envMap(pod.Containers[0].Env)
	if env[objects.EnvPGSSLRootCert] != "/etc/idempotency/postgres-tls/ca.crt" || env[objects.EnvPGSSLMode] != "verify-full" {
		t.Errorf("consumer env PGSSLROOTCERT %q PGSSLMODE %q", env[objects.EnvPGSSLRootCert], env[objects.EnvPGSSLMode])
	}
	var vol, mount bool
	for _, v := range pod.Volumes {
		vol = vol || v.Secret != nil && v.Secret.SecretName == "pg-ca" && len(v.Secret.Items) == 1 &&
			v.Secret.Items[0].Key == "ca.crt" && v.Secret.Items[0].Path == "ca.crt"
	}
	for _, m := range pod.Containers[0].VolumeMounts {
		mount = mount || m.Name == objects.PGCAVolume && m.MountPath == "/etc/idempotency/postgres-tls" && m.ReadOnly
	}
	if !vol || !mount {
		t.Errorf("CA volume %v mount %v: %+v %+v", vol, mount, pod.Volumes, pod.Containers[0].VolumeMounts)
	}
	hash := dep.Spec.Template.Annotations[objects.AnnotationConfigHash]

	// A rotated CA rolls the pods (the config hash covers it).
	other, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	te.setSecret(t, ns, "pg-ca", map[string]string{"ca.crt": ca.PEM + other.PEM})
	eventually(t, 30*time.Second, "config hash changes with the CA", func() (bool, string) {
		d := &appsv1.Deployment{}
		if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "c-consumer"}, d); err != nil {
			return false, err.Error()
		}
		h := d.Spec.Template.Annotations[objects.AnnotationConfigHash]
		return h != hash, h
	})

	// A weaker sslmode would leave the CA unused: refused, not downgraded.
	te.setSecret(t, ns, "db", map[string]string{"url": pg.TLSURL("postgres", "localhost", "sslmode=require")})
	got = te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonInvalidURL)
	if c := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady); !strings.Contains(c.Message, "sslmode=require") {
		t.Errorf("weaker sslmode: message %q", c.Message)
	}
	assertNoSecretLeak(t, te, ns, pg.Password())
}
