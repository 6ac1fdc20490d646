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
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/idempotency-dev/operator/controllers/objects"
)

// The config hash (objects.AnnotationConfigHash) rolls the consumer pods
// when a referenced Secret's value changes. Anyone who can read
// Deployments reads it, so it must reveal nothing about the values: it is
// an HMAC-SHA256 keyed by a random key only the operator holds (issue 25,
// finding 5). The key lives in a Secret of the operator's own namespace
// that the manager creates once, when it is absent, and reads on its first
// reconcile; so it is the same across restarts and for every replica.
//
// The annotation is "hmac1.<key id>.<mac>": the key id (itself an HMAC of
// a constant, so it says nothing about the key) tells a hash made with
// another key apart from a changed Secret. A hash made with another key,
// or one of the unkeyed scheme before (plain hex, SHA-256 of the values,
// recomputed in memory only to compare), whose values are unchanged is the
// operator's own change: it waits for a rollout slot of
// --max-concurrent-template-upgrades like any other (rollout.go), so the
// upgrade that brings the keyed hash does not restart every consumer at
// once.

// DefaultConfigHashKeySecret is the name of the Secret holding the key.
const DefaultConfigHashKeySecret = "idempotency-operator-config-hash-key" //nolint:gosec // G101: a Secret's name, not a credential

// configHashKeyField is the Secret's key holding the HMAC key.
const configHashKeyField = "key"

// configHashPrefix marks a keyed config hash.
const configHashPrefix = "hmac1."

// serviceAccountNamespaceFile holds the Pod's namespace in a cluster.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ConfigHashKeyNamespace is the namespace for the key's Secret when
// --config-hash-key-namespace is not given: POD_NAMESPACE (the manager's
// Deployment sets it from the downward API), else the namespace of the
// Pod's service account, else "default" (a manager run outside a cluster,
// as `make run` does).
func ConfigHashKeyNamespace() string {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return metav1.NamespaceDefault
}

// configHasher holds the operator's key, loaded (or created) once.
type configHasher struct {
	mu  sync.Mutex
	key []byte
}

// configHashKey returns the key, reading it from its Secret or creating
// the Secret with a random key when absent. A failure is returned (the reconcile is
// retried); a key once loaded is kept for the process's life.
func (r *IdempotentConsumerReconciler) configHashKey(ctx context.Context) ([]byte, error) {
	h := &r.hasher
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.key != nil {
		return h.key, nil
	}
	key := types.NamespacedName{Namespace: r.Options.ConfigHashKeyNamespace, Name: r.Options.ConfigHashKeySecret}
	for range 2 {
		var secret corev1.Secret
		err := r.APIReader.Get(ctx, key, &secret)
		if err == nil {
			k := secret.Data[configHashKeyField]
			if len(k) < 32 {
				return nil, fmt.Errorf("the config-hash key Secret %s has no key %q of at least 32 bytes; delete it and the operator makes a new one (every consumer then rolls once, in waves)", key, configHashKeyField)
			}
			h.key = k
			return k, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the config-hash key Secret %s: %w", key, err)
		}
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, fmt.Errorf("making a config-hash key: %w", err)
		}
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{
				objects.LabelManagedBy: objects.ManagedByValue,
				objects.LabelComponent: "config-hash-key",
			}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{configHashKeyField: k},
		}
		err = r.Client.Create(ctx, &secret)
		if err == nil {
			log.FromContext(ctx).Info("Created the config-hash key Secret", "secret", key.String())
			h.key = k
			return k, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the config-hash key Secret %s: %w", key, err)
		}
		// Another replica made it first: read theirs.
	}
	return nil, fmt.Errorf("the config-hash key Secret %s was created and is gone again", key)
}

// writeValues serializes the values hashed, in order.
func writeValues(w interface{ Write([]byte) (int, error) }, values []secretValue) {
	for _, v := range values {
		_, _ = w.Write([]byte(v.ref.Name))
		_, _ = w.Write([]byte{0})
		_, _ = w.Write([]byte(v.ref.Key))
		_, _ = w.Write([]byte{0})
		_, _ = w.Write([]byte(v.value))
		_, _ = w.Write([]byte{0})
	}
}

// keyID names a key without revealing it.
func keyID(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("idempotency-operator config-hash key id"))
	return hex.EncodeToString(m.Sum(nil)[:4])
}

// configHash is the keyed hash of the referenced Secret keys' values.
func configHash(key []byte, values []secretValue) string {
	m := hmac.New(sha256.New, key)
	writeValues(m, values)
	return configHashPrefix + keyID(key) + "." + hex.EncodeToString(m.Sum(nil)[:16])
}

// unkeyedConfigHash is the hash releases before the keyed one wrote: it is
// computed only to recognise their annotation, never written.
func unkeyedConfigHash(values []secretValue) string {
	h := sha256.New()
	writeValues(h, values)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// sameSecretValues reports whether a pod template's config hash current,
// made by this operator or an earlier one, stands for the same Secret
// values as desired (this operator's hash of values). A hash made with
// another key cannot be compared: it counts as the same values, so the
// new hash is applied as the operator's change, in waves, not everywhere
// at once. (A Secret rotated at the same moment waits for its slot too.)
func sameSecretValues(key []byte, current, desired string, values []secretValue) bool {
	if current == desired {
		return true
	}
	rest, ok := strings.CutPrefix(current, configHashPrefix)
	if !ok {
		return current == unkeyedConfigHash(values)
	}
	id, _, _ := strings.Cut(rest, ".")
	return id != keyID(key)
}
