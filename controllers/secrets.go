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

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer"
)

// Secrets: which keys an object references, reading them (one GET each, once
// per reconcile; Secrets are never cached) for the pod template's keyed
// config hash (confighash.go), scrubbing their values out of every message, and mapping a
// Secret's change to the objects that reference it.

// secretValue is one Secret key's value as read this reconcile.
type secretValue struct {
	ref             kafkav1alpha1.SecretKeyRef
	value           string
	resourceVersion string
}

// readSecretKey reads one key of a Secret with a direct GET: Secrets are
// not cached (only their metadata is watched), so the operator never holds
// every Secret of the cluster in memory. A missing Secret or key is a
// problem for status; any other API failure is returned.
func (r *IdempotentConsumerReconciler) readSecretKey(ctx context.Context, namespace string, ref kafkav1alpha1.SecretKeyRef) (secretValue, *problem, error) {
	return readSecretKey(ctx, r.APIReader, namespace, ref)
}

// readSecretKey is the method's body, for every controller.
func readSecretKey(ctx context.Context, reader client.Reader, namespace string, ref kafkav1alpha1.SecretKeyRef) (secretValue, *problem, error) {
	var secret corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return secretValue{}, &problem{kafkav1alpha1.ReasonSecretNotFound,
				fmt.Sprintf("Secret %q not found in namespace %q", ref.Name, namespace)}, nil
		}
		return secretValue{}, nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, ref.Name, err)
	}
	v, ok := secret.Data[ref.Key]
	if !ok || len(v) == 0 {
		if sv, ok2 := secret.StringData[ref.Key]; ok2 && sv != "" {
			v = []byte(sv)
		} else {
			return secretValue{}, &problem{kafkav1alpha1.ReasonSecretKeyMissing,
				fmt.Sprintf("Secret %q has no key %q, or it is empty", ref.Name, ref.Key)}, nil
		}
	}
	return secretValue{ref: ref, value: string(v), resourceVersion: secret.ResourceVersion}, nil, nil
}

// secretKey reads a Secret key once per reconcile and remembers its value
// for scrubbing.
func (r *IdempotentConsumerReconciler) secretKey(ctx context.Context, s *reconcileState, ref kafkav1alpha1.SecretKeyRef) (secretValue, *problem, error) {
	if v, ok := s.secretValues[ref]; ok {
		return v, nil, nil
	}
	v, prob, err := r.readSecretKey(ctx, s.obj.Namespace, ref)
	if err != nil || prob != nil {
		return v, prob, err
	}
	if s.secretValues == nil {
		s.secretValues = map[kafkav1alpha1.SecretKeyRef]secretValue{}
	}
	s.secretValues[ref] = v
	s.addSecret(v.value, false)
	return v, nil, nil
}

// scrub removes every secret this reconcile read (and its URL-encoded
// forms) from a message meant for a condition, an event or a log line.
func (s *reconcileState) scrub(msg string) string {
	for _, secret := range s.secrets {
		if len(secret) < 4 {
			continue // too short to replace without mangling the message
		}
		msg = strings.ReplaceAll(msg, secret, "[redacted]")
	}
	return msg
}

// addSecret remembers a secret value read this reconcile, so scrub keeps it
// out of messages; for a database URL its password and sslpassword are
// remembered too.
func (s *reconcileState) addSecret(v string, isURL bool) {
	if v == "" {
		return
	}
	s.secrets = append(s.secrets, v, url.QueryEscape(v), url.PathEscape(v))
	if !isURL {
		return
	}
	for _, sec := range consumer.DSNSecrets(v) { // password, sslpassword, in either form
		s.addSecret(sec, false)
	}
	if cfg, err := pgconn.ParseConfig(v); err == nil {
		s.addSecret(cfg.Password, false)
	}
}

// readConsumerSecrets reads every Secret key the consumer gets, for the
// config hash that rolls the pods when a credential changes.
func (r *IdempotentConsumerReconciler) readConsumerSecrets(ctx context.Context, s *reconcileState) ([]secretValue, *problem, error) {
	var values []secretValue
	for i, ref := range secretRefs(s.obj) {
		if i == 0 && s.databaseURL.value != "" {
			values = append(values, s.databaseURL)
			continue
		}
		v, prob, err := r.secretKey(ctx, s, ref)
		if err != nil || prob != nil {
			return nil, prob, err
		}
		values = append(values, v)
	}
	return values, nil, nil
}

// secretRefs lists every Secret key an object references: the database URL
// first, then its CA, the consumer's own database URL, then Kafka TLS and
// SASL, then the HTTP sink's authorization.
func secretRefs(obj *kafkav1alpha1.IdempotentConsumer) []kafkav1alpha1.SecretKeyRef {
	refs := []kafkav1alpha1.SecretKeyRef{obj.Spec.Database.URLSecretRef}
	if ref := obj.Spec.Database.CASecretRef; ref != nil {
		refs = append(refs, *ref)
	}
	if ref := obj.Spec.Database.ConsumerURLSecretRef; ref != nil {
		refs = append(refs, *ref)
	}
	refs = append(refs, kafkaSecretRefs(obj)...)
	if h := obj.Spec.Consumer.Sink.HTTP; h != nil && h.AuthorizationSecretRef != nil {
		refs = append(refs, *h.AuthorizationSecretRef)
	}
	return refs
}

// kafkaSecretRefs lists the Secret keys the Kafka connection needs: TLS
// files, then SASL user and password.
func kafkaSecretRefs(obj *kafkav1alpha1.IdempotentConsumer) []kafkav1alpha1.SecretKeyRef {
	var refs []kafkav1alpha1.SecretKeyRef
	if t := obj.Spec.Kafka.TLS; t != nil {
		for _, r := range []*kafkav1alpha1.SecretKeyRef{t.CASecretRef, t.ClientCertSecretRef, t.ClientKeySecretRef} {
			if r != nil {
				refs = append(refs, *r)
			}
		}
	}
	if s := obj.Spec.Kafka.SASL; s != nil {
		refs = append(refs, s.UsernameSecretRef, s.PasswordSecretRef)
	}
	return refs
}

const secretRefIndex = "spec.secretRefs" //nolint:gosec // G101: an index's name, not a credential

// indexSecretRefs lists the names of the Secrets an object references.
func indexSecretRefs(o client.Object) []string {
	obj, ok := o.(*kafkav1alpha1.IdempotentConsumer)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	var names []string
	refNames := make([]string, 0, 8)
	for _, ref := range secretRefs(obj) {
		refNames = append(refNames, ref.Name)
	}
	for _, name := range append(refNames, platformSecretNames(obj)...) { // platforms.go
		if name != "" && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// consumersForSecret maps a Secret event to the objects referencing it.
func (r *IdempotentConsumerReconciler) consumersForSecret(ctx context.Context, secret client.Object) []ctrl.Request {
	var list kafkav1alpha1.IdempotentConsumerList
	if err := r.Client.List(ctx, &list, client.InNamespace(secret.GetNamespace()),
		client.MatchingFields{secretRefIndex: secret.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Listing IdempotentConsumers for a Secret", "secret", klog.KObj(secret))
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{
			Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return reqs
}
