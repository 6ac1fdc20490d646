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
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// Releasing what a spec no longer uses. An object switched from
// spec.kafka.strimzi to bootstrapServers no longer uses its KafkaUser, and
// one that no longer needs a derived value (no consumerRole or relayRole and
// no Pooler: no "uri"; no SCRAM user name: no "username") no longer uses that
// key of its Secret "<name>-platform" ("<name>-outbox-platform"). Both are
// credentials (the KafkaUser's ACLs and Secret, a role's database URL):
// least privilege says they go. The KafkaUser is deleted (one the object
// adopted, kafka.idempotency.dev/adopt, is handed back instead: it likely
// lives in Git); the keys are taken out of the Secret (the operator never
// deletes a Secret: config/manifests_test.go), which goes with the object
// (its owner reference). The Secret is written by merging
// (applyPlatformSecret), so a key no longer derived stays until then.
//
// Not at once: pods of the former template still run with them until the
// new template has rolled out, and a pod being replaced still drains (its
// last offset commit, its last publish) for up to its termination grace
// period. So they go once the Deployment's template names none of them (it
// may keep the former template: a Secret the new one needs is missing, a
// refused template), it has rolled out (every replica on the current
// template), and that grace has passed since the rollout ended; at once
// without a Deployment (a table-only IdempotentConsumer). Only objects this
// object controls are touched. The dead-letter KafkaTopic is never deleted:
// it holds records.

// releaseGraceWithoutDeployment is how long the release waits after the
// Deployment is first seen gone: the termination grace of the operator's
// templates (objects.DeploymentFor, objects.RelayDeployment).
const releaseGraceWithoutDeployment = 45 * time.Second

// ReasonPlatformObjectReleased: a platform object the spec no longer uses
// was deleted (a KafkaUser) or emptied (the derived Secret): a Normal Event.
const ReasonPlatformObjectReleased = "PlatformObjectReleased"

const actionReleasePlatformObject = "ReleasePlatformObject"

// derivedKeys are the keys p derives into its Secret: "uri" (a pod role's
// or a Pooler's URL) and "username" (the SCRAM user name).
func (p platformSpec) derivedKeys() []string {
	var keys []string
	if p.cnpg != nil && (p.podRole != nil || p.cnpg.Pooler != "") {
		keys = append(keys, "uri")
	}
	if p.strimzi != nil && p.strimzi.Authentication != kafkav1alpha1.StrimziTLS {
		keys = append(keys, "username")
	}
	return keys
}

// release is one thing releaseUnused does.
type release struct {
	obj client.Object
	// secretKeys: for the derived Secret, the keys to take out (every
	// key: emptied); nil for the KafkaUser.
	secretKeys []string
	// orphan: the KafkaUser was adopted (kafka.idempotency.dev/adopt): it
	// is handed back (its controller reference removed), not deleted.
	orphan bool
}

// releaseUnused deletes the KafkaUser p no longer uses (hands it back when it
// was adopted) and takes out of the derived Secret the keys p no longer
// derives (emptying it when none is left), when p's owner controls them and
// no pod of the Deployment depName can still use them: its template names
// none of them, it has rolled out, and its termination grace has passed
// since. It returns what it did, how long to wait before looking again when
// something is left (0: a Deployment change wakes the reconciler), and
// whether nothing is left.
func (pc platformClient) releaseUnused(ctx context.Context, rc *releaseChecks, p platformSpec, depName string, now time.Time) (done []string, wait time.Duration, clear bool, err error) {
	ns := p.owner.GetNamespace()
	var todo []release
	if p.strimzi == nil {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(strimziUserGVK)
		err := pc.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: p.kafkaUser}, u)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		case err != nil:
			return nil, 0, false, fmt.Errorf("reading KafkaUser %s: %w", p.kafkaUser, err)
		case metav1.IsControlledBy(u, p.owner):
			todo = append(todo, release{obj: u, orphan: u.GetAnnotations()[kafkav1alpha1.AnnotationAdoptPlatformObject] == p.owner.GetName()})
		}
	}
	sec := &corev1.Secret{}
	err = pc.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: p.derivedSecret}, sec)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, 0, false, fmt.Errorf("reading Secret %s: %w", p.derivedSecret, err)
	case metav1.IsControlledBy(sec, p.owner):
		var stale []string
		for k := range sec.Data {
			if !slices.Contains(p.derivedKeys(), k) {
				stale = append(stale, k)
			}
		}
		if len(stale) > 0 {
			slices.Sort(stale)
			todo = append(todo, release{obj: sec, secretKeys: stale})
		}
	}
	if len(todo) == 0 {
		return nil, 0, true, nil
	}
	// Read from the API server, not the cache: the workload phase may
	// have just written a new template the cache has not seen yet.
	var dep *appsv1.Deployment
	cur := &appsv1.Deployment{}
	err = pc.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: depName}, cur)
	switch {
	case err == nil:
		dep = cur
	case !apierrors.IsNotFound(err):
		return nil, 0, false, fmt.Errorf("reading Deployment %s: %w", depName, err)
	}
	if dep != nil {
		// The template not yet changed (a Secret the new one needs is
		// missing, a refused template, a conflict): its pods still use them.
		refs := templateSecretUses(&dep.Spec.Template.Spec)
		for _, r := range todo {
			if r.secretKeys == nil && refs.uses(p.kafkaUser, "") {
				return nil, 0, false, nil
			}
			for _, k := range r.secretKeys {
				if refs.uses(p.derivedSecret, k) {
					return nil, 0, false, nil
				}
			}
		}
	}
	if dep != nil && !rolledOut(dep) {
		rc.notRolledOut(p)
		return nil, 0, false, nil
	}
	if wait, ok := podsReleased(dep, now, rc.rolledOutSince(p, now)); !ok {
		return nil, wait, false, nil
	}
	clear = true
	for _, r := range todo {
		msg, err := pc.apply(ctx, p, r)
		if apierrors.IsConflict(err) {
			clear, wait = false, time.Second // changed meanwhile: look again
			continue
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return done, 0, false, err
		}
		if err == nil {
			done = append(done, msg)
		}
	}
	return done, wait, clear, nil
}

// apply carries out r and says what it did.
func (pc platformClient) apply(ctx context.Context, p platformSpec, r release) (string, error) {
	switch o := r.obj.(type) {
	case *corev1.Secret:
		for _, k := range r.secretKeys {
			delete(o.Data, k)
		}
		o.StringData = nil
		if err := pc.client.Update(ctx, o); err != nil {
			return "", fmt.Errorf("updating Secret %s: %w", o.Name, err)
		}
		if len(o.Data) == 0 {
			return fmt.Sprintf("Secret %q emptied", o.Name), nil
		}
		return fmt.Sprintf("keys %s taken out of Secret %q", strings.Join(r.secretKeys, ", "), o.Name), nil
	case *unstructured.Unstructured:
		if r.orphan {
			refs := o.GetOwnerReferences()
			refs = slices.DeleteFunc(refs, func(ref metav1.OwnerReference) bool { return ref.UID == p.owner.GetUID() })
			o.SetOwnerReferences(refs)
			if err := pc.client.Update(ctx, o); err != nil {
				return "", fmt.Errorf("handing back KafkaUser %s: %w", o.GetName(), err)
			}
			return fmt.Sprintf("KafkaUser %q, adopted before, handed back (no longer this object's; not deleted)", o.GetName()), nil
		}
		uid := o.GetUID()
		if err := pc.client.Delete(ctx, o, client.Preconditions{UID: &uid}); err != nil {
			return "", fmt.Errorf("deleting KafkaUser %s: %w", o.GetName(), err)
		}
		return fmt.Sprintf("KafkaUser %q deleted", o.GetName()), nil
	}
	return "", fmt.Errorf("releasing %T", r.obj)
}

// secretUses are the Secret keys a pod template reads: name/key, or name/""
// for every key of a Secret read whole (envFrom, a volume without items).
type secretUses map[string]bool

func (u secretUses) uses(name, key string) bool {
	if u[name+"/"] {
		return true
	}
	if key == "" {
		for k := range u {
			if strings.HasPrefix(k, name+"/") {
				return true
			}
		}
		return false
	}
	return u[name+"/"+key]
}

func templateSecretUses(spec *corev1.PodSpec) secretUses {
	u := secretUses{}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				u[e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key] = true
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				u[e.SecretRef.Name+"/"] = true
			}
		}
	}
	secretVolume := func(name string, items []corev1.KeyToPath) {
		if len(items) == 0 {
			u[name+"/"] = true
		}
		for _, it := range items {
			u[name+"/"+it.Key] = true
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			secretVolume(v.Secret.SecretName, v.Secret.Items)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					secretVolume(src.Secret.Name, src.Secret.Items)
				}
			}
		}
	}
	return u
}

// releaseChecks remembers, per object, the platform use last found with
// nothing left to release, so an object that never used a platform costs
// two reads after the operator starts (one of another operator's kind,
// which may refresh the REST mapper), not on every reconcile; a change of
// use looks again until it is released.
type releaseChecks struct {
	mu   sync.Mutex
	done map[types.NamespacedName]string
	// since: when p's Deployment was first seen rolled out (or gone), per
	// object; the grace counts from it when the Deployment has no
	// Progressing condition to tell.
	since map[types.NamespacedName]time.Time
}

// rolledOutSince returns when p's Deployment was first seen rolled out (or
// gone): now, the first time it is asked since notRolledOut.
func (rc *releaseChecks) rolledOutSince(p platformSpec, now time.Time) time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.since == nil {
		rc.since = map[types.NamespacedName]time.Time{}
	}
	t, ok := rc.since[releaseKey(p)]
	if !ok {
		rc.since[releaseKey(p)] = now
		t = now
	}
	return t
}

// releaseKey: each reconciler has releaseChecks of its own, so the name
// is enough.
func releaseKey(p platformSpec) types.NamespacedName {
	return types.NamespacedName{Namespace: p.owner.GetNamespace(), Name: p.owner.GetName()}
}

func releaseUse(p platformSpec) string {
	return fmt.Sprint(p.strimzi != nil, p.derivedKeys())
}

func (rc *releaseChecks) due(p platformSpec) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	use, ok := rc.done[releaseKey(p)]
	return !ok || use != releaseUse(p)
}

// notRolledOut forgets when the Deployment was seen rolled out: a new
// rollout is under way.
func (rc *releaseChecks) notRolledOut(p platformSpec) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.since, releaseKey(p))
}

// forget makes the next release phase of key look again: its platform
// objects were written (resolve with write). When its Deployment was seen
// rolled out stays: a wait that counts from it goes on.
func (rc *releaseChecks) forget(key types.NamespacedName) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.done, key)
}

// drop forgets key altogether: the object is gone.
func (rc *releaseChecks) drop(key types.NamespacedName) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.done, key)
	delete(rc.since, key)
}

func (rc *releaseChecks) clear(p platformSpec) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.done == nil {
		rc.done = map[types.NamespacedName]string{}
	}
	rc.done[releaseKey(p)] = releaseUse(p)
	delete(rc.since, releaseKey(p))
}

// podsReleased reports whether no pod of dep can still use credentials its
// current template does not name: it has rolled out, and the termination
// grace period has passed since (the Progressing condition's
// NewReplicaSetAvailable time; seen, when there is none: a paused
// Deployment, progressDeadlineSeconds at its maximum). Otherwise wait is how
// long until it may (0: until the Deployment changes).
func podsReleased(dep *appsv1.Deployment, now, seen time.Time) (wait time.Duration, ok bool) {
	if dep == nil {
		// Gone, perhaps just now (spec.consumer removed in the same
		// edit): its pods may still drain, for the grace the operator's
		// templates give them.
		if left := seen.Add(releaseGraceWithoutDeployment).Sub(now); left > 0 {
			return left, false
		}
		return 0, true
	}
	if !rolledOut(dep) {
		return 0, false
	}
	done := seen
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "NewReplicaSetAvailable" {
			done = c.LastUpdateTime.Time
		}
	}
	grace := time.Duration(ptr.Deref(dep.Spec.Template.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)) * time.Second
	if left := done.Add(grace).Sub(now); left > 0 {
		return left, false
	}
	return 0, true
}

// releasePlatformObjects is the IdempotentConsumer's phase, after the
// workload's.
func (r *IdempotentConsumerReconciler) releasePlatformObjects(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	wait, err := releasePlatformObjects(ctx, platformClient{r.Client, r.APIReader}, &r.released, consumerPlatform(obj), objects.DeploymentName(obj),
		func(msg string) {
			r.event(obj, corev1.EventTypeNormal, ReasonPlatformObjectReleased, actionReleasePlatformObject, msg)
		})
	if wait > 0 {
		s.requeue(wait)
	}
	return err
}

// releasePlatformObjects is the Outbox's phase, after the relay's.
func (r *OutboxReconciler) releasePlatformObjects(ctx context.Context, s *outboxState) error {
	obj := s.obj
	wait, err := releasePlatformObjects(ctx, platformClient{r.Client, r.APIReader}, &r.released, outboxPlatform(obj), objects.RelayDeploymentName(obj),
		func(msg string) {
			r.event(obj, corev1.EventTypeNormal, ReasonPlatformObjectReleased, actionReleasePlatformObject, msg)
		})
	if wait > 0 {
		s.wake(wait)
	}
	return err
}

// releasePlatformObjects runs releaseUnused, when due, against the
// Deployment depName (its pods use the platform objects) and tells event
// of each change.
func releasePlatformObjects(ctx context.Context, pc platformClient, rc *releaseChecks, p platformSpec, depName string, event func(string)) (time.Duration, error) {
	if !rc.due(p) {
		return 0, nil
	}
	done, wait, clear, err := pc.releaseUnused(ctx, rc, p, depName, time.Now())
	for _, d := range done {
		event(d + ": it is no longer used by this object's spec, and no pod of it can still run with it")
	}
	if clear && err == nil {
		rc.clear(p)
	}
	return wait, err
}
