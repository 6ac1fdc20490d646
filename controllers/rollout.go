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
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// Template upgrades: a new operator release (or a new --consumer-image)
// can build a different pod template for an object whose spec did not
// change. Applying it everywhere at once would restart every consumer in
// the cluster, and every consumer group would rebalance, at the same
// moment. So such a change is applied to a bounded number of Deployments
// at a time (Options.MaxConcurrentTemplateUpgrades); the others wait,
// with the TemplateUpgradePending condition, until a slot frees. A change
// the user caused (a new generation of the spec, a changed Secret) is
// applied at once, with whatever the new template carries.

// Annotations of the rollout gate on the consumer Deployment.
const (
	// AnnotationTemplateHash is the hash of the built pod template (labels,
	// annotations and spec, before the API server's defaulting); it tells
	// a change of the template from one of the Deployment's other fields.
	AnnotationTemplateHash = "kafka.idempotency.dev/template-hash"
	// AnnotationTemplateUpgrade is set to the template hash when the
	// operator applied a template change of its own under the bound: the
	// Deployment holds a slot until that rollout completes. Kept in the
	// Deployment, it is counted after a restart of the manager too.
	AnnotationTemplateUpgrade = "kafka.idempotency.dev/template-upgrade"
)

// The condition on objects whose template upgrade waits. It is present
// only while True, like Reconciling and Stalled, and never changes Ready:
// the consumer runs on the template it has.
const (
	ConditionTemplateUpgradePending = "TemplateUpgradePending"
	// ReasonWaitingForRolloutSlot: as many Deployments as the bound allows
	// are rolling out a template upgrade.
	ReasonWaitingForRolloutSlot = "WaitingForRolloutSlot"
	// ReasonTemplateUpgradesOff: --max-concurrent-template-upgrades is 0;
	// the template changes with the next change of the spec.
	ReasonTemplateUpgradesOff = "TemplateUpgradesOff"
	// ReasonTemplateUpgraded is the Normal Event recorded when a waiting
	// template upgrade is applied.
	ReasonTemplateUpgraded = "TemplateUpgraded"
)

// DefaultMaxConcurrentTemplateUpgrades is the default bound: a tenth of
// the consumer Deployments (rounded up, so at least one).
const DefaultMaxConcurrentTemplateUpgrades = "10%"

// templateUpgradeRecheck is how long a waiting object sleeps before it
// looks for a slot again if no finished rollout woke it meanwhile.
const templateUpgradeRecheck = 5 * time.Minute

// ParseMaxConcurrentTemplateUpgrades parses the bound on template upgrades
// in progress at once: a count ("5") or a percentage of the consumer
// Deployments ("10%", rounded up). 0 (or "0%") applies template changes
// only with the next change of an object's spec.
func ParseMaxConcurrentTemplateUpgrades(s string) (intstr.IntOrString, error) {
	v := intstr.Parse(strings.TrimSpace(s))
	bad := fmt.Errorf("%q is neither a count (5) nor a percentage of the consumer Deployments up to 100%% (10%%); 0 means only with the next spec change", s)
	if v.Type == intstr.Int {
		if v.IntVal < 0 {
			return v, bad
		}
		return v, nil
	}
	pct, ok := strings.CutSuffix(v.StrVal, "%")
	var n int
	if _, err := fmt.Sscanf(pct, "%d", &n); !ok || err != nil || fmt.Sprint(n) != pct || n < 0 || n > 100 {
		return v, bad
	}
	return v, nil
}

const (
	// MetricTemplateUpgradesPending counts objects whose template upgrade waits.
	MetricTemplateUpgradesPending = "idempotency_operator_template_upgrades_pending"
	// MetricTemplateUpgradesInProgress counts Deployments rolling out a
	// template upgrade (the slots in use).
	MetricTemplateUpgradesInProgress = "idempotency_operator_template_upgrades_in_progress"
)

var (
	templateUpgradesPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricTemplateUpgradesPending,
		Help: "IdempotentConsumers whose consumer Deployment waits for a rollout slot to take the pod template of this operator release (see --max-concurrent-template-upgrades).",
	})
	templateUpgradesInProgress = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricTemplateUpgradesInProgress,
		Help: "Consumer Deployments rolling out a pod template change the operator made (slots of --max-concurrent-template-upgrades in use).",
	})
)

func init() {
	metrics.Registry.MustRegister(templateUpgradesPending, templateUpgradesInProgress)
}

// templateHash hashes a built pod template.
func templateHash(t *corev1.PodTemplateSpec) string {
	b, _ := json.Marshal(t)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// operatorCaused reports whether the change from current to desired is the
// operator's own: the Deployment differs, its pod template too (a Deployment without the
// template hash, made by a release before this one, counts as differing)
// while the object's spec is the one last reconciled and the Secrets'
// values are the same (sameSecrets compares the two config hashes; one of
// an earlier scheme or key is compared as confighash.go says), and the last template was not refused by Pod Security
// admission. The generation is compared with status.observedGeneration
// as read at the start of this reconcile: any spec change, even to a field
// the Deployment does not use, makes the change the user's and it is
// applied at once.
func operatorCaused(obj *kafkav1alpha1.IdempotentConsumer, current, desired *appsv1.Deployment, sameSecrets func(currentHash, desiredHash string) bool) bool {
	if current == nil || current.Annotations[objects.AnnotationSpecHash] == desired.Annotations[objects.AnnotationSpecHash] ||
		current.Annotations[AnnotationTemplateHash] == desired.Annotations[AnnotationTemplateHash] {
		return false // nothing to apply, or nothing that restarts pods
	}
	if obj.Generation != obj.Status.ObservedGeneration {
		return false
	}
	if c := obj.GetCondition(kafkav1alpha1.ConditionConsumerReady); c != nil && c.Reason == ReasonPodSecurityRejected {
		// The spec's template was refused, not applied: it is judged
		// again on every reconcile, as before it was observed.
		return false
	}
	return sameSecrets(current.Spec.Template.Annotations[objects.AnnotationConfigHash], desired.Spec.Template.Annotations[objects.AnnotationConfigHash])
}

// rolledOut reports whether a Deployment's current template runs on all
// its replicas (the test consumerStatus uses for ConsumerReady).
func rolledOut(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas >= want &&
		d.Status.AvailableReplicas >= want && d.Status.Replicas == d.Status.UpdatedReplicas
}

// upgrading reports whether a Deployment holds a slot: the operator
// applied its current template as a template upgrade, still rolling out.
func upgrading(d *appsv1.Deployment) bool {
	u := d.Annotations[AnnotationTemplateUpgrade]
	return u != "" && u == d.Annotations[AnnotationTemplateHash] && !rolledOut(d)
}

// templateGate bounds the template upgrades in progress. Its count comes
// from the Deployments in the manager's cache (their annotations and
// status), so it survives a restart of the manager; reservations of this
// process cover the moment between an apply and the cache seeing it, and
// the mutex keeps two reconciles from taking the last slot together.
type templateGate struct {
	max    intstr.IntOrString
	reader client.Reader
	// wake enqueues waiting objects when slots free (a source.Channel).
	wake chan event.GenericEvent

	mu sync.Mutex
	// reserved: Deployments this process applied an upgrade to, with the
	// template hash and when, until the cache shows that template.
	reserved map[types.NamespacedName]reservation
	// waiting: objects whose upgrade waits, since when (oldest go first).
	waiting map[types.NamespacedName]time.Time
	// woken: waiting objects already sent to the queue, and when.
	woken map[types.NamespacedName]time.Time
}

type reservation struct {
	hash string
	at   time.Time
}

func newTemplateGate(max intstr.IntOrString, reader client.Reader) *templateGate {
	return &templateGate{
		max:      max,
		reader:   reader,
		wake:     make(chan event.GenericEvent, 1024),
		reserved: map[types.NamespacedName]reservation{},
		waiting:  map[types.NamespacedName]time.Time{},
		woken:    map[types.NamespacedName]time.Time{},
	}
}

// slots is the bound for total consumer Deployments.
func (g *templateGate) slots(total int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&g.max, total, true)
	if err != nil || n < 0 {
		return 0 // refused by ParseMaxConcurrentTemplateUpgrades before
	}
	return n
}

// inProgress lists the Deployments holding a slot and counts all consumer
// Deployments; g.mu is held.
func (g *templateGate) inProgress(ctx context.Context, now time.Time) (map[types.NamespacedName]bool, int, error) {
	var list appsv1.DeploymentList
	// Read only, so the cache's objects are not copied (a waiter lists all
	// Deployments on each of its reconciles).
	if err := g.reader.List(ctx, &list, client.MatchingLabels{objects.LabelManagedBy: objects.ManagedByValue}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, 0, fmt.Errorf("listing consumer Deployments to count template upgrades in progress: %w", err)
	}
	busy := map[types.NamespacedName]bool{}
	for i := range list.Items {
		d := &list.Items[i]
		key := types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
		if r, ok := g.reserved[key]; ok && d.Annotations[AnnotationTemplateUpgrade] == r.hash {
			delete(g.reserved, key) // the cache shows it now
		}
		if upgrading(d) {
			busy[key] = true
		}
	}
	for key, r := range g.reserved {
		if now.Sub(r.at) > time.Minute {
			// The cache shows an apply within seconds: this one failed
			// (or the Deployment was deleted) without a release.
			delete(g.reserved, key)
			continue
		}
		busy[key] = true
	}
	templateUpgradesInProgress.Set(float64(len(busy)))
	return busy, len(list.Items), nil
}

// gateDecision is the gate's answer for one object.
type gateDecision struct {
	wait    bool   // leave the Deployment as it is
	slot    bool   // a slot was taken: release it if the apply fails
	message string // why it waits, for the condition
}

// acquire takes a slot for the Deployment dep of object obj, unless the
// bound is reached; dep already holding one keeps it.
func (g *templateGate) acquire(ctx context.Context, obj, dep types.NamespacedName, hash string, now time.Time) (gateDecision, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	busy, total, err := g.inProgress(ctx, now)
	if err != nil {
		return gateDecision{}, err
	}
	limit := g.slots(total)
	if busy[dep] || len(busy) < limit {
		g.reserved[dep] = reservation{hash: hash, at: now}
		g.done(obj)
		return gateDecision{slot: true}, nil
	}
	if _, ok := g.waiting[obj]; !ok {
		g.waiting[obj] = now
	}
	delete(g.woken, obj)
	templateUpgradesPending.Set(float64(len(g.waiting)))
	if limit == 0 {
		return gateDecision{wait: true, message: "This operator release builds a different consumer pod template; with --max-concurrent-template-upgrades=0 it is applied with the next change of the spec (or of a referenced Secret), not before"}, nil
	}
	names := make([]string, 0, len(busy))
	for k := range busy {
		names = append(names, k.Namespace+"/"+k.Name)
	}
	slices.Sort(names)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return gateDecision{wait: true, message: fmt.Sprintf(
		"This operator release builds a different consumer pod template; it is applied when a rollout slot frees (%d of %d in use by %s; --max-concurrent-template-upgrades=%s), or at once with the next change of the spec. The consumer keeps running on its current template",
		len(busy), limit, strings.Join(names, ", "), g.max.String())}, nil
}

// release gives back a slot taken for an apply that did not happen.
func (g *templateGate) release(dep types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.reserved, dep)
}

// finished forgets obj as a waiter (its template is applied, or it no
// longer differs, or the object is gone).
func (g *templateGate) finished(obj types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done(obj)
}

func (g *templateGate) done(obj types.NamespacedName) {
	delete(g.waiting, obj)
	delete(g.woken, obj)
	templateUpgradesPending.Set(float64(len(g.waiting)))
}

// wakeWaiters sends the oldest waiting objects, as many as slots are free,
// to the work queue. A waiter woken within the last minute is not sent
// again (its reconcile is queued or running).
func (g *templateGate) wakeWaiters(ctx context.Context, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		return nil
	}
	busy, total, err := g.inProgress(ctx, now)
	if err != nil {
		return err
	}
	free := g.slots(total) - len(busy)
	for _, at := range g.woken {
		if now.Sub(at) < time.Minute {
			free--
		}
	}
	if free <= 0 {
		return nil
	}
	keys := make([]types.NamespacedName, 0, len(g.waiting))
	for k := range g.waiting {
		if at, ok := g.woken[k]; !ok || now.Sub(at) >= time.Minute {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b types.NamespacedName) int {
		if c := g.waiting[a].Compare(g.waiting[b]); c != 0 {
			return c
		}
		return strings.Compare(a.String(), b.String())
	})
	for _, k := range keys[:min(free, len(keys))] {
		o := &kafkav1alpha1.IdempotentConsumer{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
		select {
		case g.wake <- event.GenericEvent{Object: o}:
			g.woken[k] = now
		default:
			return nil // the queue is full; the waiters' own recheck comes later
		}
	}
	return nil
}

// gateTemplate decides whether the built Deployment may be applied now.
// It marks desired as a template upgrade when it takes a slot, keeps the
// mark of an upgrade still in its slot, and sets or removes the
// TemplateUpgradePending condition. A nil gate (no manager) decides
// nothing.
func (r *IdempotentConsumerReconciler) gateTemplate(ctx context.Context, s *reconcileState, current, desired *appsv1.Deployment, sameSecrets func(currentHash, desiredHash string) bool) (gateDecision, error) {
	obj := s.obj
	objKey := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	hash := desired.Annotations[AnnotationTemplateHash]
	if current != nil && current.Annotations[AnnotationTemplateUpgrade] == hash {
		// Still the upgrade applied before: keep the mark, or an unrelated
		// apply (replicas) would drop the Deployment from the count.
		desired.Annotations[AnnotationTemplateUpgrade] = hash
	}
	g := r.rollout
	if g == nil || !operatorCaused(obj, current, desired, sameSecrets) {
		if g != nil {
			g.finished(objKey)
		}
		meta.RemoveStatusCondition(&obj.Status.Conditions, ConditionTemplateUpgradePending)
		return gateDecision{}, nil
	}
	dep := types.NamespacedName{Namespace: current.Namespace, Name: current.Name}
	d, err := g.acquire(ctx, objKey, dep, hash, r.Clock.Now())
	if err != nil {
		return d, err
	}
	if d.wait {
		reason := ReasonWaitingForRolloutSlot
		if g.slots(1) == 0 {
			reason = ReasonTemplateUpgradesOff
		}
		if obj.SetCondition(ConditionTemplateUpgradePending, metav1.ConditionTrue, reason, d.message) {
			r.event(obj, corev1.EventTypeNormal, reason, actionApplyDeployment, d.message)
			log.FromContext(ctx).Info("Template upgrade waits", "reason", reason)
		}
		s.requeue(templateUpgradeRecheck)
		return d, nil
	}
	desired.Annotations[AnnotationTemplateUpgrade] = hash
	if meta.FindStatusCondition(obj.Status.Conditions, ConditionTemplateUpgradePending) != nil {
		meta.RemoveStatusCondition(&obj.Status.Conditions, ConditionTemplateUpgradePending)
	}
	return d, nil
}

// templateUpgraded records an applied template upgrade, and wakes waiters
// when this object's Deployment holds no slot (it finished rolling out an
// upgrade, or a spec change replaced one): with no waiters it costs
// nothing.
func (r *IdempotentConsumerReconciler) templateUpgraded(ctx context.Context, s *reconcileState, d gateDecision, applied bool, dep *appsv1.Deployment) error {
	if r.rollout == nil {
		return nil
	}
	if d.slot {
		if !applied {
			r.rollout.release(types.NamespacedName{Namespace: dep.Namespace, Name: dep.Name})
		} else {
			r.event(s.obj, corev1.EventTypeNormal, ReasonTemplateUpgraded, actionApplyDeployment, fmt.Sprintf(
				"Applied the consumer pod template of this operator release to Deployment %s (a rollout slot of --max-concurrent-template-upgrades=%s)",
				dep.Name, r.rollout.max.String()))
		}
	}
	if dep != nil && !upgrading(dep) {
		return r.rollout.wakeWaiters(ctx, r.Clock.Now())
	}
	return nil
}
