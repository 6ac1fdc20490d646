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

package objects

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// TestRelayDeploymentCredentialsFromSecretsOnly: TLS files, SASL
// credentials, the relay's database URL and the PostgreSQL CA reach the
// relay only as Secret references and mounted Secret files; the spec's
// relay settings become its variables; nothing sets CONSUMER_OUTBOX_OWNER.
func TestRelayDeploymentCredentialsFromSecretsOnly(t *testing.T) {
	ob := &kafkav1alpha1.Outbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "u-1"},
		Spec: kafkav1alpha1.OutboxSpec{
			Kafka: kafkav1alpha1.OutboxKafkaSpec{
				BootstrapServers: []string{"k-0:9093", "k-1:9093"}, Topics: []string{"a"},
				TLS: &kafkav1alpha1.KafkaTLS{CASecretRef: &kafkav1alpha1.SecretKeyRef{Name: "kafka-ca", Key: "ca.crt"}},
				SASL: &kafkav1alpha1.KafkaSASL{Mechanism: kafkav1alpha1.SASLScramSHA512,
					UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: "k", Key: "user"}, PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: "k", Key: "pass"}},
			},
			Database: kafkav1alpha1.OutboxDatabaseSpec{
				URLSecretRef:      kafkav1alpha1.SecretKeyRef{Name: "owner", Key: "url"},
				RelayURLSecretRef: &kafkav1alpha1.SecretKeyRef{Name: "relay", Key: "url"},
				CASecretRef:       &kafkav1alpha1.SecretKeyRef{Name: "pg-ca", Key: "ca.crt"},
				Schema:            "shop", Table: "events",
			},
			Relay: kafkav1alpha1.OutboxRelaySpec{Replicas: ptr.To(int32(3)), PublishTimeout: &metav1.Duration{Duration: 7e9}, BatchSize: ptr.To(int32(100))},
		},
	}
	dep := RelayDeployment(ob, Options{DefaultImage: "img:1"})
	if dep.Name != "orders-outbox-relay" || *dep.Spec.Replicas != 3 {
		t.Errorf("name %s replicas %d", dep.Name, *dep.Spec.Replicas)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "img:1" {
		t.Errorf("image %q", c.Image)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	fromSecret := func(name, secret, key string) {
		t.Helper()
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != secret || e.ValueFrom.SecretKeyRef.Key != key {
			t.Errorf("%s = %+v, want Secret %s key %s", name, e, secret, key)
		}
	}
	fromSecret(envvars.DatabaseURL, "relay", "url")
	fromSecret(envvars.SASLUsername, "k", "user")
	fromSecret(envvars.SASLPassword, "k", "pass")
	for name, want := range map[string]string{
		envvars.Brokers: "k-0:9093,k-1:9093", envvars.OutboxSchema: "shop", envvars.OutboxTable: "events",
		envvars.OutboxPublishTimeout: "7s", envvars.OutboxBatchSize: "100", envvars.TLSEnabled: "true",
		envvars.SASLMechanism: "SCRAM-SHA-512", EnvPGSSLMode: "verify-full",
	} {
		if env[name].Value != want {
			t.Errorf("%s = %q, want %q", name, env[name].Value, want)
		}
	}
	if !strings.HasPrefix(env[envvars.TLSCAFile].Value, tlsMountDir) || !strings.HasPrefix(env[EnvPGSSLRootCert].Value, pgCAMountDir) {
		t.Errorf("CA files %q, %q", env[envvars.TLSCAFile].Value, env[EnvPGSSLRootCert].Value)
	}
	if _, ok := env[envvars.OutboxOwner]; ok {
		t.Errorf("%s is set: the operator owns the DDL", envvars.OutboxOwner)
	}
	secrets := map[string]bool{}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Secret.SecretName] = true
		}
	}
	if !secrets["kafka-ca"] || !secrets["pg-ca"] || secrets["owner"] || secrets["relay"] {
		t.Errorf("Secret volumes %v, want kafka-ca and pg-ca only", secrets)
	}
	if RelayDeployment(ob, Options{DefaultImage: "img:1"}).Annotations[AnnotationSpecHash] != dep.Annotations[AnnotationSpecHash] {
		t.Error("the spec hash is not stable")
	}
	if name, ok := OutboxNameOf(dep.Name); !ok || name != "orders" {
		t.Errorf("OutboxNameOf(%q) = %q, %v", dep.Name, name, ok)
	}
}
