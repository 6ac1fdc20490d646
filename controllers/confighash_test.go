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
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// unsaltedHash is what the config-hash annotation held before it was keyed
// (issue 25, finding 5): SHA-256 over the Secrets' names, keys and values,
// which anyone who reads Deployments could recompute for a guessed password.
func unsaltedHash(name, key, value string) string {
	h := sha256.New()
	for _, s := range []string{name, key, value} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// TestConfigHashIsNoPasswordOracle: the pod template's config-hash
// annotation cannot be recomputed from the Secrets' values alone (it is
// not the unsalted SHA-256 of them), still changes when a value changes,
// and stays the same across a restart of the manager (the key is kept).
func TestConfigHashIsNoPasswordOracle(t *testing.T) {
	const keyNS = "operator-home"
	eo := envOptions{
		options: Options{ConfigHashKeyNamespace: keyNS},
		setup: func(t *testing.T, c client.Client) {
			if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: keyNS}}); err != nil {
				t.Fatal(err)
			}
		},
	}
	te := startEnv(t, eo)
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	te.create(t, newConsumer(ns, "c"))
	te.waitReady(t, ns, "c")

	annotation := func() string {
		t.Helper()
		dep := &appsv1.Deployment{}
		if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "c-consumer"}, dep); err != nil {
			t.Fatal(err)
		}
		return dep.Spec.Template.Annotations[objects.AnnotationConfigHash]
	}
	got := annotation()
	if got == "" {
		t.Fatal("no config-hash annotation on the pod template")
	}
	if got == unsaltedHash("db", "url", dbURL) {
		t.Fatalf("the config-hash annotation %q is the unsalted SHA-256 of the database URL: anyone who reads Deployments can test guessed passwords against it", got)
	}

	// The key is in the operator's namespace, random, and the annotation is
	// the HMAC of the values under it.
	keySecret := &corev1.Secret{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: keyNS, Name: DefaultConfigHashKeySecret}, keySecret); err != nil {
		t.Fatalf("the config-hash key Secret: %v", err)
	}
	key := keySecret.Data["key"]
	values := []secretValue{{ref: kafkav1alpha1.SecretKeyRef{Name: "db", Key: "url"}, value: dbURL}}
	if len(key) < 32 || got != configHash(key, values) {
		t.Fatalf("annotation %q, want the HMAC under the stored key (%d bytes) %q", got, len(key), configHash(key, values))
	}

	// A restarted manager reads the same key: nothing rolls.
	te.stopManager()
	te.startManager(t, te.cfg.Config, eo)
	te.poke(t, ns, "c")
	time.Sleep(2 * time.Second)
	te.waitReady(t, ns, "c")
	if again := annotation(); again != got {
		t.Fatalf("after a restart of the manager the annotation is %q, was %q: the key was not kept", again, got)
	}

	// A changed value changes it.
	te.setSecret(t, ns, "db", map[string]string{"url": dbURL + "&application_name=rotated"})
	eventually(t, 30*time.Second, "config hash changes with the URL", func() (bool, string) {
		h := annotation()
		return h != got && strings.HasPrefix(h, configHashPrefix), h
	})
}

// TestConfigHashKeyed: the hash depends on the key (two operators with
// different keys disagree, one key agrees with itself) and on every value;
// a hash of the unkeyed scheme before, or of another key, with unchanged
// values counts as the same values (the change is the operator's, paced).
func TestConfigHashKeyed(t *testing.T) {
	k1, k2 := make([]byte, 32), make([]byte, 32)
	k2[0] = 1
	v := []secretValue{{ref: kafkav1alpha1.SecretKeyRef{Name: "db", Key: "url"}, value: "postgres://u:hunter2@db/app"}}
	w := []secretValue{{ref: kafkav1alpha1.SecretKeyRef{Name: "db", Key: "url"}, value: "postgres://u:hunter3@db/app"}}
	if h1, h2 := configHash(k1, v), configHash(k1, v); h1 != h2 {
		t.Errorf("one key, one value: two hashes %q and %q", h1, h2)
	}
	if configHash(k1, v) == configHash(k2, v) {
		t.Error("two keys give the same hash: it does not depend on the key")
	}
	if configHash(k1, v) == configHash(k1, w) {
		t.Error("a changed password gives the same hash")
	}
	if strings.Contains(configHash(k1, v), unsaltedHash("db", "url", v[0].value)) {
		t.Error("the keyed hash contains the unkeyed one")
	}
	for _, c := range []struct {
		name    string
		current string
		values  []secretValue
		want    bool
	}{
		{"same key, same values", configHash(k1, v), v, true},
		{"same key, changed value", configHash(k1, w), v, false},
		{"unkeyed scheme, same values", unkeyedConfigHash(v), v, true},
		{"unkeyed scheme, changed value", unkeyedConfigHash(w), v, false},
		{"another key: cannot tell, the operator's change", configHash(k2, w), v, true},
		{"no hash", "", v, false},
	} {
		if got := sameSecretValues(k1, c.current, configHash(k1, c.values), c.values); got != c.want {
			t.Errorf("%s: sameSecretValues = %t, want %t", c.name, got, c.want)
		}
	}
}
