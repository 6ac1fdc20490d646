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
// one that no longer needs derived values (no consumerRole or relayRole and
// no Pooler, no SCRAM user name) no longer uses its Secret
// "<name>-platform" ("<name>-outbox-platform"). Both hold credentials (the
// KafkaUser's ACLs and Secret, a role's database URL): least privilege says
// they go. The KafkaUser is deleted; the Secret is emptied (the operator
// never deletes a Secret: config/manifests_test.go), and goes with the
// object (its owner reference). Not at once: pods of the former template still run with them
// until the new template has rolled out, and a pod being replaced still
// drains (its last offset commit, its last publish) for up to its
// termination grace period. So they are deleted once the Deployment has
// rolled out (every replica on the current template) and that grace has
// passed since the rollout ended (its Progressing condition's
// NewReplicaSetAvailable time); at once without a Deployment (a table-only
// IdempotentConsumer). Only objects this object controls are touched. The
// dead-letter KafkaTopic is never deleted: it holds records.

// ReasonPlatformObjectReleased: a platform object the spec no longer uses
// was deleted (a KafkaUser) or emptied (the derived Secret): a Normal Event.
const ReasonPlatformObjectReleased = "PlatformObjectReleased"

const actionReleasePlatformObject = "ReleasePlatformObject"

// derivedUsed reports whether p needs the derived Secret: a pod role's or a
// Pooler's URL, or a SCRAM user name.
func (p platformSpec) derivedUsed() bool {
	return p.cnpg != nil && (p.podRole != nil || p.cnpg.Pooler != "") ||
		p.strimzi != nil && p.strimzi.Authentication != kafkav1alpha1.StrimziTLS
}

// releaseUnused deletes the KafkaUser and empties the derived Secret p no
// longer uses, when p's owner controls them and the pods of dep (nil: none)
// no longer can (its pods: those of the Deployment depName, if any). It returns what it did, and how long to wait before
// looking again when something is left for the pods (0: nothing left, or a
// Deployment change wakes the reconciler).
func (pc platformClient) releaseUnused(ctx context.Context, p platformSpec, depName string, now time.Time) (deleted []string, wait time.Duration, clear bool, err error) {
	var unused []client.Object
	if p.strimzi == nil {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(strimziUserGVK)
		unused = append(unused, named(u, p.owner.GetNamespace(), p.kafkaUser))
	}
	if !p.derivedUsed() {
		unused = append(unused, named(&corev1.Secret{}, p.owner.GetNamespace(), p.derivedSecret))
	}
	var owned []client.Object
	for _, o := range unused {
		err := pc.reader.Get(ctx, client.ObjectKeyFromObject(o), o)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			continue
		case err != nil:
			return nil, 0, false, fmt.Errorf("reading %s: %w", o.GetName(), err)
		}
		if sec, ok := o.(*corev1.Secret); ok && len(sec.Data) == 0 {
			continue // emptied before
		}
		if metav1.IsControlledBy(o, p.owner) {
			owned = append(owned, o)
		}
	}
	if len(owned) == 0 {
		return nil, 0, true, nil
	}
	// Read from the API server, not the cache: the workload phase may
	// have just written a new template the cache has not seen yet.
	var dep *appsv1.Deployment
	cur := &appsv1.Deployment{}
	err = pc.reader.Get(ctx, types.NamespacedName{Namespace: p.owner.GetNamespace(), Name: depName}, cur)
	switch {
	case err == nil:
		dep = cur
	case !apierrors.IsNotFound(err):
		return nil, 0, false, fmt.Errorf("reading Deployment %s: %w", depName, err)
	}
	if wait, ok := podsReleased(dep, now); !ok {
		return nil, wait, false, nil
	}
	for _, o := range owned {
		if sec, ok := o.(*corev1.Secret); ok {
			sec.Data, sec.StringData = nil, nil
			if err := pc.client.Update(ctx, sec); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return deleted, 0, false, fmt.Errorf("emptying Secret %s: %w", sec.Name, err)
			}
			deleted = append(deleted, fmt.Sprintf("Secret %q emptied", sec.Name))
			continue
		}
		uid := o.GetUID()
		err := pc.client.Delete(ctx, o, client.Preconditions{UID: &uid})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return deleted, 0, false, fmt.Errorf("deleting %s: %w", o.GetName(), err)
		}
		deleted = append(deleted, fmt.Sprintf("%s %q deleted", o.(*unstructured.Unstructured).GetKind(), o.GetName()))
	}
	return deleted, 0, true, nil
}

// releaseChecks remembers, per object, the platform use last found with
// nothing left to release, so an object that never used a platform costs
// two reads after the operator starts (one of another operator's kind,
// which may refresh the REST mapper), not on every reconcile; a change of
// use looks again until it is released.
type releaseChecks struct {
	mu   sync.Mutex
	done map[string]string
}

func releaseKey(p platformSpec) string {
	return fmt.Sprintf("%T/%s/%s", p.owner, p.owner.GetNamespace(), p.owner.GetName())
}

func releaseUse(p platformSpec) string {
	return fmt.Sprint(p.strimzi != nil, p.derivedUsed())
}

func (rc *releaseChecks) due(p platformSpec) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	use, ok := rc.done[releaseKey(p)]
	return !ok || use != releaseUse(p)
}

func (rc *releaseChecks) clear(p platformSpec) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.done == nil {
		rc.done = map[string]string{}
	}
	rc.done[releaseKey(p)] = releaseUse(p)
}

func named[T client.Object](o T, namespace, name string) T {
	o.SetNamespace(namespace)
	o.SetName(name)
	return o
}

// podsReleased reports whether no pod of dep can still use credentials its
// current template does not name: it has rolled out, and the termination
// grace period has passed since. Otherwise wait is how long until it may
// (0: until the Deployment changes).
func podsReleased(dep *appsv1.Deployment, now time.Time) (wait time.Duration, ok bool) {
	if dep == nil {
		return 0, true
	}
	if !rolledOut(dep) {
		return 0, false
	}
	var done time.Time
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
	done, wait, clear, err := pc.releaseUnused(ctx, p, depName, time.Now())
	for _, d := range done {
		event(d + ": it is no longer used by this object's spec, and no pod of it can still run with it")
	}
	if clear && err == nil {
		rc.clear(p)
	}
	return wait, err
}
