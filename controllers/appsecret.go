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
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update

// The application Secret "<name>-app" (CloudNativePG's "-app" Secret is the
// model) tells a service that brings its own consumer what to call, and as
// which role: it is mounted or read as environment variables. Its keys:
const (
	AppSecretSchema           = "schema"
	AppSecretTable            = "table"
	AppSecretScope            = "scope"
	AppSecretConsumerGroup    = "consumerGroup"
	AppSecretClaimFunction    = "claimFunction"
	AppSecretClaimOneFunction = "claimOneFunction"
	AppSecretPositionsTable   = "positionsTable"
	// AppSecretURI is the consumer role's connection URL
	// (spec.database.consumerURLSecretRef), present only when that is set:
	// the owner's URL (urlSecretRef) never goes into it.
	AppSecretURI = "uri"
)

const actionApplyApplicationSecret = "ApplyApplicationSecret"

// LabelApplicationSecret marks the application Secrets the operator keeps.
const LabelApplicationSecret = "kafka.idempotency.dev/application-secret" //nolint:gosec // G101: a label's name, not a credential

// applicationSecretData is what the application Secret holds for obj,
// without the URI. Nothing in it is a credential but the URI, which is why
// it is a Secret: one mount carries both.
func applicationSecretData(obj *kafkav1alpha1.IdempotentConsumer) map[string][]byte {
	t := tableOf(obj).WithDefaults()
	return map[string][]byte{
		AppSecretSchema:           []byte(t.Schema),
		AppSecretTable:            []byte(t.Name),
		AppSecretScope:            []byte(t.Scope),
		AppSecretConsumerGroup:    []byte(obj.Spec.Kafka.GroupID),
		AppSecretClaimFunction:    []byte(t.ClaimFunction()),
		AppSecretClaimOneFunction: []byte(t.ClaimOneFunction()),
		AppSecretPositionsTable:   []byte(t.Schema + "." + dedup.PositionsTableName(t)),
	}
}

// reconcileApplicationSecret creates or updates the application Secret once
// the table is ready (before, its names would promise a table that is not
// there), and names it in status. A Secret of that name that this object
// does not control is left alone and stalls the object: an application
// mounting it would read someone else's values.
func (r *IdempotentConsumerReconciler) reconcileApplicationSecret(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	if !s.databaseOK {
		return nil
	}
	name := obj.ApplicationSecretName()
	key := types.NamespacedName{Namespace: obj.Namespace, Name: name}
	want := applicationSecretData(obj)
	if ref := obj.Spec.Database.ConsumerURLSecretRef; ref != nil {
		// Read (and remembered for scrubbing) by the roles phase already; a
		// problem with it is that phase's DatabaseRoles condition, and the
		// key is left out until it is fixed.
		v, prob, err := r.secretKey(ctx, s, *ref)
		if err != nil {
			return err
		}
		if prob == nil {
			want[AppSecretURI] = []byte(v.value)
		}
	}
	labels := map[string]string{LabelApplicationSecret: "true", objects.LabelManagedBy: objects.ManagedByValue, objects.LabelInstance: obj.Name}

	// Secrets are not cached (only their metadata is watched): read from
	// the API server.
	current := &corev1.Secret{}
	err := r.APIReader.Get(ctx, key, current)
	switch {
	case apierrors.IsNotFound(err):
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: name, Labels: labels},
			Type:       corev1.SecretTypeOpaque,
			Data:       want,
		}
		if err := controllerutil.SetControllerReference(obj, sec, r.Client.Scheme()); err != nil {
			return fmt.Errorf("owning Secret %s: %w", name, err)
		}
		if err := r.Client.Create(ctx, sec); err != nil {
			return fmt.Errorf("creating Secret %s: %w", name, err)
		}
		log.FromContext(ctx).Info("Created the application Secret", "secret", name)
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", name, err)
	case !metav1.IsControlledBy(current, obj) && predecessorsSecret(current, obj):
		// Left by this object's predecessor (same name, deleted, so a new
		// UID): the garbage collector may not have removed it yet. Take it
		// over rather than wait.
		current.OwnerReferences = slices.DeleteFunc(current.OwnerReferences, func(ref metav1.OwnerReference) bool {
			return ref.Controller != nil && *ref.Controller
		})
		if err := controllerutil.SetControllerReference(obj, current, r.Client.Scheme()); err != nil {
			return fmt.Errorf("owning Secret %s: %w", name, err)
		}
		current.Data = want
		maps.Copy(current.Labels, labels)
		if err := r.Client.Update(ctx, current); err != nil {
			return fmt.Errorf("taking over Secret %s: %w", name, err)
		}
		log.FromContext(ctx).Info("Took over the application Secret of this object's predecessor", "secret", name)
	case !metav1.IsControlledBy(current, obj):
		obj.Status.ApplicationSecretName = ""
		msg := fmt.Sprintf("Secret %q exists and is not controlled by this object, so the operator cannot publish how to use table %s in it; rename or delete that Secret",
			name, obj.Status.Table)
		// Ready still holds the last reconcile's reason here: one Event per
		// change, not per retry.
		if prev := obj.GetCondition(kafkav1alpha1.ConditionReady); prev == nil || prev.Reason != kafkav1alpha1.ReasonApplicationSecretConflict {
			r.event(obj, corev1.EventTypeWarning, kafkav1alpha1.ReasonApplicationSecretConflict, actionApplyApplicationSecret, msg)
		}
		s.stall(kafkav1alpha1.ReasonApplicationSecretConflict, msg)
		return nil
	case !maps.EqualFunc(current.Data, want, func(a, b []byte) bool { return string(a) == string(b) }) || !labelsInclude(current.Labels, labels):
		current.Data = want
		if current.Labels == nil {
			current.Labels = map[string]string{}
		}
		maps.Copy(current.Labels, labels)
		if err := r.Client.Update(ctx, current); err != nil {
			return fmt.Errorf("updating Secret %s: %w", name, err)
		}
		log.FromContext(ctx).Info("Updated the application Secret", "secret", name)
	}
	obj.Status.ApplicationSecretName = name
	return nil
}

// predecessorsSecret reports whether sec is the application Secret of an
// earlier IdempotentConsumer with obj's name: labelled as one, controlled by
// an object of this kind and name with another UID. Names are unique in a
// namespace, so that object is gone.
func predecessorsSecret(sec *corev1.Secret, obj *kafkav1alpha1.IdempotentConsumer) bool {
	ref := metav1.GetControllerOf(sec)
	return ref != nil && sec.Labels[LabelApplicationSecret] == "true" &&
		ref.Kind == "IdempotentConsumer" && ref.APIVersion == kafkav1alpha1.GroupVersion.String() &&
		ref.Name == obj.Name && ref.UID != obj.UID
}

func labelsInclude(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
