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
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// The Outbox controller: the outbox table (outbox.Ensure, marked with the
// object's UID), its partitions (outbox.Maintain, on the dedup tables'
// schedule), the grants of the relay's and the emitters' roles
// (outbox.Grant), the relay Deployment (objects.RelayDeployment), and a
// status read from the outbox's own tables (outbox.ReadStats) and the
// brokers. The table is never dropped by the operator: its rows are events
// the business committed; deleting the Outbox stops the relay (its
// Deployment goes with it) and leaves the table.

// OutboxControllerName names the Outbox controller.
const OutboxControllerName = "outbox"

// Event reasons of the Outbox controller that are not a condition's reason.
const (
	ReasonOutboxTableCreated = "TableReady"
	// ReasonOutboxRoleRevoked: the privileges of a former relay or
	// emitter role were taken back (a Normal Event).
	ReasonOutboxRoleRevoked  = "RoleRevoked"
	ReasonRelayRoleGranted   = "RelayRoleGranted"
	ReasonEmitterRoleGranted = "EmitterRoleGranted"
)

const (
	actionEnsureOutbox   = "EnsureOutbox"
	actionCheckRetention = "CheckConsumerRetention"
	actionApplyRelay     = "ApplyRelayDeployment"
)

// DefaultOutboxStatsInterval is how often an Outbox's backlog is read
// again when nothing else wakes it.
const DefaultOutboxStatsInterval = 30 * time.Second

// OutboxReconciler reconciles Outbox objects.
type OutboxReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads Secrets (not cached).
	APIReader client.Reader
	// Pools are the database pools, shared with the IdempotentConsumer
	// controller (one per URL).
	Pools *PoolCache
	// Recorder emits Kubernetes Events; nil disables them.
	Recorder events.EventRecorder
	// Clock: partition maintenance plans by it.
	Clock clock.PassiveClock
	// Topics reads topic metadata from the brokers; nil means KafkaAdmin.
	Topics TopicInspector
	// Options are the IdempotentConsumer controller's tunables; this
	// controller uses ConsumerImage, MaintenanceLead, DatabaseTimeout,
	// RetryBase/RetryMax, KafkaTimeout, TopicCheckInterval,
	// TopicRetryBase/TopicRetryMax and DatabaseHostAllowlist.
	Options Options
	// StatsInterval is how often the backlog is read again; default
	// DefaultOutboxStatsInterval.
	StatsInterval time.Duration

	backoff  *backoff
	mu       sync.Mutex
	memory   map[types.NamespacedName]*outboxMemory // released: platforms_release.go
	released releaseChecks
}

// outboxMemory is what the controller keeps per Outbox between reconciles:
// the latest look at the brokers and when to maintain partitions next.
type outboxMemory struct {
	topicFP       string
	topicNext     time.Time
	topicFailures int
	topicErr      error
	topicReason   string
	infos         map[string]TopicInfo // the latest answer (nil after a failure)
	goodInfos     map[string]TopicInfo // the latest answer without an error

	maintainGen  int64
	maintainNext time.Time
	warnedShort  string
	warnedLimit  string
}

// +kubebuilder:rbac:groups=kafka.idempotency.dev,resources=outboxes,verbs=get;list;watch
// +kubebuilder:rbac:groups=kafka.idempotency.dev,resources=outboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kafka.idempotency.dev,resources=outboxes/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler and its watches.
func (r *OutboxReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Pools == nil {
		return fmt.Errorf("setting up the %s controller: no PoolCache", OutboxControllerName)
	}
	if r.Topics == nil {
		r.Topics = KafkaAdmin{Timeout: r.Options.KafkaTimeout}
	}
	if r.StatsInterval <= 0 {
		r.StatsInterval = DefaultOutboxStatsInterval
	}
	r.backoff = newBackoff(r.Options.RetryBase, r.Options.RetryMax)
	r.memory = map[types.NamespacedName]*outboxMemory{}
	exportOutboxMetrics(mgr) // outboxmetrics.go
	return ctrl.NewControllerManagedBy(mgr).
		Named(OutboxControllerName).
		For(&kafkav1alpha1.Outbox{}, builder.WithPredicates(specOrDeletionChanged())).
		Owns(&appsv1.Deployment{}).
		// The retention warning follows the consumers of the topics.
		Watches(&kafkav1alpha1.IdempotentConsumer{}, handler.EnqueueRequestsFromMapFunc(r.outboxesOfConsumer)).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.outboxesOfSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.MaxConcurrentReconciles}).
		Complete(r)
}

// outboxesOfConsumer maps an IdempotentConsumer to the Outboxes of its
// namespace that publish to its topic.
func (r *OutboxReconciler) outboxesOfConsumer(ctx context.Context, o client.Object) []ctrl.Request {
	ic, ok := o.(*kafkav1alpha1.IdempotentConsumer)
	if !ok {
		return nil
	}
	return r.outboxesWhere(ctx, o.GetNamespace(), func(ob *kafkav1alpha1.Outbox) bool {
		return slices.Contains(ob.Spec.Kafka.Topics, ic.Spec.Kafka.Topic)
	})
}

// outboxesOfSecret maps a Secret to the Outboxes of its namespace naming it,
// or reading it through a platform integration (platforms.go).
func (r *OutboxReconciler) outboxesOfSecret(ctx context.Context, o client.Object) []ctrl.Request {
	return r.outboxesWhere(ctx, o.GetNamespace(), func(ob *kafkav1alpha1.Outbox) bool {
		return slices.ContainsFunc(outboxSecretRefs(ob), func(ref kafkav1alpha1.SecretKeyRef) bool { return ref.Name == o.GetName() }) ||
			slices.Contains(outboxPlatform(ob).secretNames(), o.GetName())
	})
}

func (r *OutboxReconciler) outboxesWhere(ctx context.Context, ns string, match func(*kafkav1alpha1.Outbox) bool) []ctrl.Request {
	var list kafkav1alpha1.OutboxList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		log.FromContext(ctx).Error(err, "Listing Outboxes", "namespace", ns)
		return nil
	}
	var reqs []ctrl.Request
	for i := range list.Items {
		if match(&list.Items[i]) {
			reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: list.Items[i].Name}})
		}
	}
	return reqs
}

// outboxSecretRefs are every Secret key an Outbox names.
func outboxSecretRefs(ob *kafkav1alpha1.Outbox) []kafkav1alpha1.SecretKeyRef {
	refs := []kafkav1alpha1.SecretKeyRef{ob.Spec.Database.URLSecretRef}
	if r := ob.Spec.Database.RelayURLSecretRef; r != nil {
		refs = append(refs, *r)
	}
	if r := ob.Spec.Database.CASecretRef; r != nil {
		refs = append(refs, *r)
	}
	return append(refs, outboxKafkaSecretRefs(ob)...)
}

func outboxKafkaSecretRefs(ob *kafkav1alpha1.Outbox) []kafkav1alpha1.SecretKeyRef {
	var refs []kafkav1alpha1.SecretKeyRef
	if t := ob.Spec.Kafka.TLS; t != nil {
		for _, r := range []*kafkav1alpha1.SecretKeyRef{t.CASecretRef, t.ClientCertSecretRef, t.ClientKeySecretRef} {
			if r != nil {
				refs = append(refs, *r)
			}
		}
	}
	if s := ob.Spec.Kafka.SASL; s != nil {
		refs = append(refs, s.UsernameSecretRef, s.PasswordSecretRef)
	}
	return refs
}

// outboxState is what one Reconcile observed.
type outboxState struct {
	obj  *kafkav1alpha1.Outbox
	now  time.Time
	mem  *outboxMemory
	sec  reconcileState // only its secrets, for scrub and logDatabaseDetail
	pool *pgxpool.Pool
	tbl  outbox.Table
	// values are the Secret keys read, and versions their Secrets'
	// resourceVersions (the relay's config hash).
	values   map[kafkav1alpha1.SecretKeyRef]secretValue
	problems []problem // the not-ready conditions, in order
	retry    bool      // a problem a retry may fix
	requeue  time.Duration
}

func (s *outboxState) wake(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if s.requeue == 0 || d < s.requeue {
		s.requeue = d
	}
}

// Reconcile runs the phases: database and grants, partitions, stats,
// brokers and topics, the consumers' retention, the relay Deployment; then
// Ready and one status write.
func (r *OutboxReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &kafkav1alpha1.Outbox{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the relay Deployment goes with it; the table stays
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("outbox", klog.KObj(obj)))
	// platforms.go: CloudNativePG and Strimzi references become the
	// ordinary refs, in memory, before anything reads them.
	platformStatus := obj.Status.Platform.DeepCopy()
	retiringBefore := slices.Clone(obj.Status.RetiringTopics)
	if !obj.Spec.Suspend {
		if err := r.noteRetiringTopics(ctx, obj); err != nil { // outbox_retire.go
			return ctrl.Result{}, err
		}
	}
	platformCond, platformProb, err := r.resolvePlatforms(ctx, obj, !obj.Spec.Suspend)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !obj.Spec.Suspend && outboxPlatform(obj).used() {
		r.released.forget(req.NamespacedName) // as the IdempotentConsumer's
	}
	orig := obj.DeepCopy()
	orig.Status.Platform = platformStatus
	orig.Status.RetiringTopics = retiringBefore
	s := &outboxState{obj: obj, now: r.Clock.Now(), mem: r.memoryOf(req.NamespacedName), values: map[kafkav1alpha1.SecretKeyRef]secretValue{}}
	s.tbl = outbox.Table{Schema: obj.SchemaName(), Name: obj.TableName(), Interval: dedup.Interval(obj.Interval())}
	obj.Status.Table = s.tbl.String()
	obj.Status.EmitFunction = s.tbl.EmitFunction()

	switch {
	case obj.Spec.Suspend:
		// Before any platform wait: a suspended Outbox writes nothing, so
		// an object it would wait for (a KafkaUser it does not write while
		// suspended) is not its state.
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSuspended,
			"spec.suspend is true: no DDL, no grants, no partition maintenance, no change to the relay Deployment")
		obj.Status.ObservedGeneration = obj.Generation
		return ctrl.Result{}, r.patchStatus(ctx, orig, obj)
	case platformProb != nil:
		// The wait (a Cluster, Secret or KafkaUser still being made) is
		// polled, without an Event. A database wait holds every phase; a
		// Kafka one (a KafkaUser not Ready: Strimzi's User Operator says so
		// while the brokers are down) holds only the Kafka side, the topic
		// checks and the relay Deployment, which keeps its current template:
		// partitions are still premade and dropped, roles granted, stats
		// read, as for a broker that is down without Strimzi.
		obj.SetCondition(platformCond, metav1.ConditionFalse, platformProb.reason, platformProb.message)
		s.problems = append(s.problems, *platformProb)
		observeProblem(platformProb.reason)
		s.wake(platformPollInterval)
		if platformCond == kafkav1alpha1.ConditionKafkaReady {
			if err := r.outboxDatabasePhases(ctx, s); err != nil {
				return ctrl.Result{}, err
			}
		}
	default:
		if err := r.outboxPhases(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}

	// Ready: the first problem, or all four components True.
	if len(s.problems) > 0 {
		p := s.problems[0]
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, p.reason, p.message)
	} else {
		backlog := int64(0)
		if obj.Status.Backlog != nil {
			backlog = *obj.Status.Backlog
		}
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady, fmt.Sprintf(
			"Outbox %s is ready and relayed to %s; backlog %d", s.tbl, strings.Join(obj.Spec.Kafka.Topics, ", "), backlog))
	}
	obj.Status.ObservedGeneration = obj.Generation
	if s.retry {
		s.wake(r.backoff.next(req.NamespacedName))
	} else {
		r.backoff.reset(req.NamespacedName)
	}
	s.wake(r.StatsInterval)
	if err := r.patchStatus(ctx, orig, obj); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.requeue}, nil
}

// outboxPhases runs the phases in order; only API-server failures stop them.
func (r *OutboxReconciler) outboxPhases(ctx context.Context, s *outboxState) error {
	if err := r.outboxDatabasePhases(ctx, s); err != nil {
		return err
	}
	for _, phase := range []func(context.Context, *outboxState) error{r.outboxTopics, r.outboxConsumerRetention, r.outboxRelay, r.releasePlatformObjects} {
		if err := phase(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// outboxDatabasePhases are the phases that need only the database: the
// table, grants, partitions and stats.
func (r *OutboxReconciler) outboxDatabasePhases(ctx context.Context, s *outboxState) error {
	if err := r.outboxDatabase(ctx, s); err != nil {
		return err
	}
	r.outboxPartitions(ctx, s)
	r.outboxStats(ctx, s)
	return nil
}

func (r *OutboxReconciler) memoryOf(key types.NamespacedName) *outboxMemory {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.memory[key]
	if !ok {
		m = &outboxMemory{}
		r.memory[key] = m
	}
	return m
}

func (r *OutboxReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.memory, key)
	r.mu.Unlock()
	r.backoff.reset(key)
	r.released.drop(key)
}

func (r *OutboxReconciler) patchStatus(ctx context.Context, orig, obj *kafkav1alpha1.Outbox) error {
	if equality.Semantic.DeepEqual(orig.Status, obj.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, obj, client.MergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing status: %w", err)
	}
	return nil
}

func (r *OutboxReconciler) event(obj *kafkav1alpha1.Outbox, eventType, reason, action, note string) {
	if r.Recorder == nil {
		return
	}
	const maxNote = 1024
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.Recorder.Eventf(obj, nil, eventType, reason, action, "%s", note)
}

// notReady sets a component condition False, records the problem for Ready,
// counts it, and emits a Warning Event when the reason changes.
func (r *OutboxReconciler) notReady(ctx context.Context, s *outboxState, condType, action, reason, message string, transient bool) {
	message = s.sec.scrub(message)
	if s.obj.SetCondition(condType, metav1.ConditionFalse, reason, message) {
		r.event(s.obj, corev1.EventTypeWarning, reason, action, message)
		log.FromContext(ctx).Info("Outbox not ready", "condition", condType, "reason", reason, "message", message)
	}
	s.problems = append(s.problems, problem{reason, message})
	s.retry = s.retry || transient
	observeProblem(reason)
}

// secret reads one Secret key once per reconcile.
func (r *OutboxReconciler) secret(ctx context.Context, s *outboxState, ref kafkav1alpha1.SecretKeyRef, isURL bool) (secretValue, *problem, error) {
	if v, ok := s.values[ref]; ok {
		return v, nil, nil
	}
	v, prob, err := readSecretKey(ctx, r.APIReader, s.obj.Namespace, ref)
	if err != nil || prob != nil {
		return v, prob, err
	}
	s.values[ref] = v
	s.sec.addSecret(v.value, isURL)
	return v, nil, nil
}

// outboxDatabase opens the pool, ensures the table and grants the roles.
func (r *OutboxReconciler) outboxDatabase(ctx context.Context, s *outboxState) error {
	obj := s.obj
	fail := func(reason, message string, transient bool) {
		r.notReady(ctx, s, kafkav1alpha1.ConditionDatabaseReady, actionConnectDatabase, reason, message, transient)
	}
	if err := s.tbl.Validate(); err != nil {
		fail(kafkav1alpha1.ReasonInvalidSpec, err.Error(), false)
		return nil
	}
	val, prob, err := r.secret(ctx, s, obj.Spec.Database.URLSecretRef, true)
	if err != nil {
		return err
	}
	if prob != nil {
		fail(prob.reason, prob.message, false)
		return nil
	}
	if prob := r.Options.DatabaseHostAllowlist.checkDatabaseHosts(val.value); prob != nil {
		fail(prob.reason, prob.message, false)
		return nil
	}
	db := DatabaseConn{URL: val.value}
	if ref := obj.Spec.Database.CASecretRef; ref != nil {
		ca, prob, err := r.secret(ctx, s, *ref, false)
		if err != nil {
			return err
		}
		if prob != nil {
			fail(prob.reason, "Cannot read the PostgreSQL CA (spec.database.caSecretRef): "+prob.message, false)
			return nil
		}
		if !x509.NewCertPool().AppendCertsFromPEM([]byte(ca.value)) {
			fail(kafkav1alpha1.ReasonInvalidDatabaseCA, (&InvalidCAError{Name: ref.Name, Key: ref.Key}).Error(), false)
			return nil
		}
		db.CA = []byte(ca.value)
	}
	pool, err := r.Pools.pool(db)
	if err != nil {
		reason, transient := classifyDatabaseError(err)
		fail(reason, describeDatabaseError(reason, err), transient)
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	err = outbox.Ensure(dctx, pool, s.tbl, string(obj.UID), outbox.WithMaxMessageBytes(int(obj.MaxMessageBytes())), outbox.WithTopics(obj.Spec.Kafka.Topics))
	var pendingCheck *outbox.TopicCheckPendingError
	if errors.As(err, &pendingCheck) {
		// The rest is done; the topic check is installed on a later
		// reconcile (a retiring topic waits for it: outbox_retire.go).
		log.FromContext(ctx).Info("The outbox's topic check waits for its lock", "error", s.sec.scrub(err.Error()))
		s.wake(10 * time.Second)
		err = nil
	}
	if err != nil {
		var own *dedup.OwnershipError
		if errors.As(err, &own) {
			reason, msg := kafkav1alpha1.ReasonTableClaimed, fmt.Sprintf(
				"Table %s belongs to another object (UID %s in its ownership marker), not this Outbox: choose another spec.database.table", own.Table, own.Owner)
			if own.Owner == "" {
				reason, msg = kafkav1alpha1.ReasonTableNotOwned, fmt.Sprintf(
					"Table %s exists but was not created by this operator (it has no ownership marker); refusing to manage it: choose another spec.database.table", own.Table)
			}
			fail(reason, msg, false)
			return nil
		}
		reason, transient := classifyDatabaseError(err)
		logDatabaseDetail(ctx, &s.sec, reason, err)
		fail(reason, describeDatabaseError(reason, err), transient)
		return nil
	}
	// Least privilege: the relay's own role, and the emitters'; what a
	// former one was granted is taken back below.
	prevRelay := obj.Status.RelayRole
	obj.Status.RelayRole = ""
	if ref := obj.Spec.Database.RelayURLSecretRef; ref != nil {
		rv, prob, err := r.secret(ctx, s, *ref, true)
		if err != nil {
			return err
		}
		if prob != nil {
			fail(prob.reason, "spec.database.relayURLSecretRef: "+prob.message, false)
			return nil
		}
		role := urlUser(rv.value)
		if role == "" {
			fail(kafkav1alpha1.ReasonInvalidURL, "spec.database.relayURLSecretRef: the URL names no user (or does not parse): the operator grants the relay's privileges to that user", false)
			return nil
		}
		if err := outbox.Grant(dctx, pool, s.tbl, role, outbox.AccessRelay); err != nil {
			fail(kafkav1alpha1.ReasonGrantFailed, fmt.Sprintf("Granting role %s what the relay needs on %s failed: %v", quoteRole(role), s.tbl, err), true)
			return nil
		}
		obj.Status.RelayRole = role
	}
	for _, role := range obj.Spec.Database.EmitterRoles {
		if err := outbox.Grant(dctx, pool, s.tbl, role, outbox.AccessEmitter); err != nil {
			fail(kafkav1alpha1.ReasonGrantFailed, fmt.Sprintf("Granting emitter role %s INSERT and EXECUTE on %s failed (does the role exist?): %v", quoteRole(role), s.tbl, err), true)
			return nil
		}
		if !slices.Contains(obj.Status.EmitterRoles, role) {
			obj.Status.EmitterRoles = append(obj.Status.EmitterRoles, role)
		}
	}
	// Take back what former roles were granted: never from the operator's
	// own role (the table's owner), nor from a role still granted the same
	// access. A revoke that fails is retried on the next reconcile (the
	// role stays in status until then).
	owner := urlUser(val.value)
	if prevRelay != "" && prevRelay != obj.Status.RelayRole && prevRelay != owner {
		if err := outbox.Revoke(dctx, pool, s.tbl, prevRelay, outbox.AccessRelay); err != nil {
			fail(kafkav1alpha1.ReasonGrantFailed, fmt.Sprintf("Taking back the relay privileges of former relay role %s on %s failed: %v", quoteRole(prevRelay), s.tbl, err), true)
			obj.Status.RelayRole = prevRelay
			return nil
		}
		r.event(obj, corev1.EventTypeNormal, ReasonOutboxRoleRevoked, actionEnsureOutbox, fmt.Sprintf("Took back the relay privileges of former relay role %s on %s", quoteRole(prevRelay), s.tbl))
	}
	var kept, stale []string
	for _, role := range obj.Status.EmitterRoles {
		if slices.Contains(obj.Spec.Database.EmitterRoles, role) {
			kept = append(kept, role)
		} else if role != owner {
			stale = append(stale, role)
		}
	}
	for i, role := range stale {
		if err := outbox.Revoke(dctx, pool, s.tbl, role, outbox.AccessEmitter); err != nil {
			fail(kafkav1alpha1.ReasonGrantFailed, fmt.Sprintf("Taking back the emit privileges of former emitter role %s on %s failed: %v", quoteRole(role), s.tbl, err), true)
			obj.Status.EmitterRoles = append(kept, stale[i:]...)
			return nil
		}
		r.event(obj, corev1.EventTypeNormal, ReasonOutboxRoleRevoked, actionEnsureOutbox, fmt.Sprintf("Took back the emit privileges of former emitter role %s on %s", quoteRole(role), s.tbl))
	}
	obj.Status.EmitterRoles = kept
	s.pool = pool
	r.outboxDurability(ctx, dctx, s, pool)
	msg := fmt.Sprintf("Outbox table %s is ready; services emit with SELECT %s(topic, key, payload, headers, traceparent)", s.tbl, s.tbl.EmitFunction())
	if obj.Status.RelayRole == "" {
		msg += "; the relay uses the owner's role (spec.database.relayURLSecretRef gives it a role of its own)"
	}
	if obj.SetCondition(kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionTrue, kafkav1alpha1.ReasonDatabaseReady, msg) {
		r.event(obj, corev1.EventTypeNormal, ReasonOutboxTableCreated, actionEnsureOutbox, msg)
	}
	return nil
}

// outboxDurability sets DatabaseDurable (a warning, not part of Ready): the
// relay publishes what is visible, so a commit the database can still lose
// after it became visible is an event in Kafka for a change the database no
// longer has. The emit function commits synchronously (on) whatever the
// session's setting, which leaves the asynchronous standbys.
func (r *OutboxReconciler) outboxDurability(ctx, dctx context.Context, s *outboxState, pool *pgxpool.Pool) {
	d, err := dedup.ReadDurability(dctx, pool)
	cond := kafkav1alpha1.ConditionDatabaseDurable
	if err != nil {
		s.obj.SetCondition(cond, metav1.ConditionUnknown, kafkav1alpha1.ReasonDurabilityUnknown,
			"Reading synchronous_standby_names and pg_stat_replication failed: "+s.sec.scrub(err.Error()))
		return
	}
	status, reason, msg := outboxDurabilityCondition(d)
	if s.obj.SetCondition(cond, status, reason, msg) && status == metav1.ConditionFalse {
		r.event(s.obj, corev1.EventTypeWarning, reason, actionEnsureOutbox, msg)
		log.FromContext(ctx).Info("Outbox database not durable", "reason", reason, "message", msg)
	}
}

// outboxDurabilityCondition is DatabaseDurable of an outbox on a server as d
// describes it, with every emitting transaction committing with
// synchronous_commit on (the emit function sets it).
func outboxDurabilityCondition(d dedup.Durability) (metav1.ConditionStatus, string, string) {
	d.SynchronousCommit = "on"
	risks := d.Risks()
	if len(risks) == 0 {
		return metav1.ConditionTrue, kafkav1alpha1.ReasonDurable, fmt.Sprintf(
			"An emitting transaction is visible only once durable (the emit function commits with synchronous_commit on); %d standby(s), none asynchronous", len(d.Standbys))
	}
	msgs := make([]string, len(risks))
	for i, rk := range risks {
		msgs[i] = rk.Message
	}
	return metav1.ConditionFalse, risks[0].Reason, strings.Join(msgs, "; ") +
		": the relay may publish an event whose transaction a failover then loses (an event for a change the promoted database does not have); replicate synchronously (synchronous_standby_names; CloudNativePG: spec.postgresql.synchronous) for an outbox"
}

// outboxPartitions keeps the partitions: on the first reconcile, on a spec
// change, and then at the next partition boundary or expiry minus the lead,
// as for a dedup table.
func (r *OutboxReconciler) outboxPartitions(ctx context.Context, s *outboxState) {
	obj := s.obj
	if s.pool == nil {
		obj.SetCondition(kafkav1alpha1.ConditionPartitionsReady, metav1.ConditionFalse, kafkav1alpha1.ReasonWaitingForDatabase, "Waiting for the database to be ready")
		s.problems = append(s.problems, problem{kafkav1alpha1.ReasonWaitingForDatabase, "Waiting for the database to be ready"})
		return
	}
	if s.mem.maintainGen == obj.Generation && !s.mem.maintainNext.IsZero() && s.now.Before(s.mem.maintainNext) &&
		outboxCondStatus(obj, kafkav1alpha1.ConditionPartitionsReady) == metav1.ConditionTrue {
		s.wake(s.mem.maintainNext.Sub(s.now))
		return
	}
	iv := s.tbl.Interval
	premake, retention := obj.Premake(), obj.Retention()
	if err := dedup.ValidatePolicy(iv, premake, retention); err != nil {
		r.notReady(ctx, s, kafkav1alpha1.ConditionPartitionsReady, actionMaintainPartitions, kafkav1alpha1.ReasonInvalidSpec, err.Error(), false)
		return
	}
	lead := r.Options.MaintenanceLead
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	start := time.Now()
	res, err := outbox.Maintain(dctx, s.pool, s.tbl, s.now.Add(lead), premake, retention+lead)
	observeMaintenance(time.Since(start), err, len(res.Created), len(res.Dropped))
	if err != nil {
		reason, transient := classifyDatabaseError(err)
		if reason == kafkav1alpha1.ReasonDatabaseError {
			reason = kafkav1alpha1.ReasonMaintenanceFailed
		}
		logDatabaseDetail(ctx, &s.sec, reason, err)
		r.notReady(ctx, s, kafkav1alpha1.ConditionPartitionsReady, actionMaintainPartitions, reason,
			"Partition maintenance failed: "+describeDatabaseError(reason, err), transient)
		return
	}
	if len(res.Created) > 0 || len(res.Dropped) > 0 {
		log.FromContext(ctx).Info("Maintained the outbox's partitions", "created", partitionNames(res.Created), "dropped", partitionNames(res.Dropped))
	}
	state := dedup.State{Exists: true, Partitions: res.Partitions, Window: res.Window, Foreign: res.Foreign}
	ours := ownPartitions(state, obj.TableName(), iv)
	ps := &kafkav1alpha1.PartitionsStatus{Count: int32(len(state.Partitions))} //nolint:gosec // G115: PostgreSQL allows far fewer partitions
	if n := len(state.Partitions); n > 0 {
		ps.Oldest, ps.Newest = state.Partitions[0].Name, state.Partitions[n-1].Name
	}
	for _, p := range ours {
		if !p.From.Before(s.now) {
			ps.Ahead++
		}
	}
	obj.Status.Partitions = ps
	t := metav1.NewTime(s.now.UTC().Truncate(time.Second))
	obj.Status.LastMaintenanceTime = &t
	next := nextMaintenance(s.now, iv, lead, retention, ours)
	s.mem.maintainGen, s.mem.maintainNext = obj.Generation, next
	s.wake(min(next.Sub(s.now), r.Options.MaxRequeue))

	horizon := s.now
	for range premake {
		horizon = iv.Next(iv.Floor(horizon))
	}
	if !state.Window.Contains(s.now) || !state.Window.Contains(horizon) {
		r.notReady(ctx, s, kafkav1alpha1.ConditionPartitionsReady, actionMaintainPartitions, kafkav1alpha1.ReasonPartitionsMissing, fmt.Sprintf(
			"The partitions cover %s but must cover now (%s) and %d intervals ahead", state.Window, s.now.UTC().Format(time.RFC3339), premake), false)
		s.mem.maintainNext = time.Time{}
		return
	}
	obj.SetCondition(kafkav1alpha1.ConditionPartitionsReady, metav1.ConditionTrue, kafkav1alpha1.ReasonPartitionsReady, fmt.Sprintf(
		"%d partitions cover %s; a partition is dropped %s after its end once all its rows are published; next maintenance at %s",
		len(state.Partitions), state.Window, retention, next.UTC().Format(time.RFC3339)))
}

// outboxCondStatus is the status of a condition ("" when absent).
func outboxCondStatus(obj *kafkav1alpha1.Outbox, condType string) metav1.ConditionStatus {
	if c := obj.GetCondition(condType); c != nil {
		return c.Status
	}
	return ""
}

// outboxStats reads the backlog, the oldest unpublished row and the cursor.
func (r *OutboxReconciler) outboxStats(ctx context.Context, s *outboxState) {
	obj := s.obj
	if s.pool == nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	st, err := outbox.ReadStats(dctx, s.pool, s.tbl)
	if err != nil {
		reason, transient := classifyDatabaseError(err)
		logDatabaseDetail(ctx, &s.sec, reason, err)
		r.notReady(ctx, s, kafkav1alpha1.ConditionDatabaseReady, actionConnectDatabase, reason,
			"Reading the outbox's backlog and cursor failed: "+describeDatabaseError(reason, err), transient)
		return
	}
	obj.Status.Backlog = &st.Backlog
	obj.Status.OldestUnpublishedTime = nil
	if !st.OldestUnpublished.IsZero() {
		t := metav1.NewTime(st.OldestUnpublished.UTC().Truncate(time.Second))
		obj.Status.OldestUnpublishedTime = &t
	}
	c := &kafkav1alpha1.OutboxCursor{Lo: fmt.Sprint(st.Lo), Hi: fmt.Sprint(st.Hi)}
	if st.After != nil {
		c.After = st.After.String()
	}
	if !st.CursorUpdated.IsZero() {
		t := metav1.NewTime(st.CursorUpdated.UTC().Truncate(time.Second))
		c.UpdatedTime = &t
	}
	obj.Status.Cursor = c
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	obj.Status.StatsTime = &now
	r.retireTopics(ctx, s, st)
}

// outboxTopics asks the brokers about spec.kafka.topics (again after
// TopicCheckInterval when they answered, after TopicRetryBase doubling to
// TopicRetryMax when they did not or a topic is missing, and at once when
// the brokers, topics or credentials change), and sets KafkaReady.
func (r *OutboxReconciler) outboxTopics(ctx context.Context, s *outboxState) error {
	obj := s.obj
	k := obj.Spec.Kafka
	brokers := strings.Join(k.BootstrapServers, ",")
	fail := func(reason, message string) {
		r.notReady(ctx, s, kafkav1alpha1.ConditionKafkaReady, actionInspectTopics, reason, message, true)
	}
	values := map[kafkav1alpha1.SecretKeyRef]string{}
	for _, ref := range outboxKafkaSecretRefs(obj) {
		v, prob, err := r.secret(ctx, s, ref, false)
		if err != nil {
			return err
		}
		if prob != nil {
			r.notReady(ctx, s, kafkav1alpha1.ConditionKafkaReady, actionInspectTopics, prob.reason, "Cannot read the Kafka credentials: "+prob.message, false)
			return nil
		}
		values[ref] = v.value
	}
	h := sha256.New()
	for _, p := range append(append([]string{brokers}, k.Topics...), fmt.Sprint(k.TLS != nil, k.SASL != nil)) {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	for _, ref := range outboxKafkaSecretRefs(obj) {
		h.Write([]byte(values[ref]))
		h.Write([]byte{0})
	}
	fp := hex.EncodeToString(h.Sum(nil)[:12])
	m := s.mem
	realNow := time.Now()
	if fp != m.topicFP || !realNow.Before(m.topicNext) {
		if fp != m.topicFP {
			*m = outboxMemory{maintainGen: m.maintainGen, maintainNext: m.maintainNext, warnedShort: m.warnedShort, warnedLimit: m.warnedLimit, topicFP: fp}
		}
		m.infos, m.topicErr, m.topicReason = nil, nil, ""
		conn, err := kafkaClientConnection(k.BootstrapServers, k.TLS, k.SASL, func(ref kafkav1alpha1.SecretKeyRef) string { return values[ref] })
		if err != nil {
			m.topicErr, m.topicReason = err, kafkav1alpha1.ReasonInvalidKafkaCredentials
		} else if infos, err := r.Topics.Inspect(ctx, conn, k.Topics...); err != nil {
			m.topicErr, m.topicReason = err, classifyKafkaError(err)
			if brokerConnectFailure(m.topicReason) {
				log.FromContext(ctx).Info("Cannot read the topics from the brokers", "reason", m.topicReason,
					"bootstrapServers", k.BootstrapServers, "error", s.sec.scrub(err.Error()))
			}
		} else {
			m.infos = infos
		}
		conclusive := m.topicErr == nil
		for _, t := range k.Topics {
			if i := m.infos[t]; i.Err != nil || !i.Exists {
				conclusive = false
			}
		}
		if m.topicErr == nil {
			m.goodInfos = m.infos
		}
		if conclusive {
			m.topicFailures, m.topicNext = 0, realNow.Add(r.Options.TopicCheckInterval)
			if r.Options.TopicCheckInterval < 0 {
				m.topicNext = realNow.Add(100 * 365 * 24 * time.Hour)
			}
		} else {
			m.topicFailures++
			m.topicNext = realNow.Add(backoffDelay(r.Options.TopicRetryBase, r.Options.TopicRetryMax, m.topicFailures))
		}
		m.topicFP = fp
	}
	s.wake(m.topicNext.Sub(realNow))

	obj.Status.Topics = nil
	for _, t := range k.Topics {
		i, ok := m.goodInfos[t]
		if !ok {
			continue
		}
		ts := kafkav1alpha1.OutboxTopicStatus{Name: t, Exists: i.Exists, Partitions: i.Partitions}
		if i.RetentionKnown {
			ts.Retention = formatRetention(i.Retention)
		}
		ts.MaxMessageBytes = i.MaxMessageBytes
		obj.Status.Topics = append(obj.Status.Topics, ts)
	}

	if m.topicErr != nil {
		msg := fmt.Sprintf("Cannot read topics %s from the brokers %s: %v", quoteList(k.Topics), brokers, m.topicErr)
		switch {
		case m.topicReason == kafkav1alpha1.ReasonKafkaAuthFailed:
			msg = fmt.Sprintf("The brokers %s did not accept the SASL credentials of spec.kafka.sasl; the operator's log says more", brokers)
		case m.topicReason == kafkav1alpha1.ReasonKafkaTLSFailed:
			msg = fmt.Sprintf("The TLS handshake with the brokers %s failed: their certificate is not signed by the CA of spec.kafka.tls or names another host, or the port does not speak TLS; the operator's log says which", brokers)
		case brokerConnectFailure(m.topicReason):
			msg = fmt.Sprintf("Cannot reach the brokers %s of spec.kafka.bootstrapServers (no connection, no answer or no TLS session): the relay cannot publish and the backlog grows; check the addresses; the operator's log says why, and the operator looks again on its own", brokers)
		}
		fail(m.topicReason, msg)
		return nil
	}
	var missing, found []string
	for _, t := range k.Topics {
		i := m.infos[t]
		switch {
		case i.Err != nil:
			fail(classifyKafkaError(i.Err), fmt.Sprintf("The brokers %s refused to describe topic %q: %v", brokers, t, i.Err))
			return nil
		case !i.Exists:
			missing = append(missing, t)
		default:
			found = append(found, fmt.Sprintf("%q (%d partitions)", t, i.Partitions))
		}
	}
	if len(missing) > 0 {
		fail(kafkav1alpha1.ReasonTopicNotFound, fmt.Sprintf(
			"Topic(s) %s do not exist on the brokers %s: the relay stops at the first event to such a topic, keeping its place, until it is created; create them (the operator looks again on its own)",
			quoteList(missing), brokers))
		return nil
	}
	msg := fmt.Sprintf("The brokers %s have topic(s) %s", brokers, strings.Join(found, ", "))
	// A topic that takes smaller records than the relay sends: the emit
	// function checks the relay's limit only, so an event between the two
	// would be committed and then hold the stream (message_too_large).
	var small []string
	relayMax := int64(obj.MaxMessageBytes())
	for _, t := range k.Topics {
		if n := m.infos[t].MaxMessageBytes; n > 0 && n < relayMax {
			small = append(small, fmt.Sprintf("%q takes records up to %d bytes", t, n))
		}
	}
	if len(small) > 0 {
		warning := fmt.Sprintf("topic(s) %s, less than the relay sends (spec.relay.maxMessageBytes %d): an event between the two would be emitted and then hold the relay's stream; set spec.relay.maxMessageBytes to at most the smallest topic limit, and the emit function refuses such events",
			strings.Join(small, ", "), relayMax)
		msg += "; warning: " + warning
		if s.mem.warnedLimit != warning {
			r.event(obj, corev1.EventTypeWarning, ReasonTopicLimitBelowRelay, actionInspectTopics, "T"+warning[1:])
		}
		s.mem.warnedLimit = warning
	} else {
		s.mem.warnedLimit = ""
	}
	obj.SetCondition(kafkav1alpha1.ConditionKafkaReady, metav1.ConditionTrue, kafkav1alpha1.ReasonTopicsFound, msg)
	return nil
}

func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// outboxConsumerRetention compares, for each IdempotentConsumer of the
// namespace reading one of the outbox's topics, its dedup retention with the
// outbox's retention plus the topic's, and sets ConsumerRetentionCovered (a
// warning: Ready does not depend on it), with a Warning Event when a
// consumer falls short.
func (r *OutboxReconciler) outboxConsumerRetention(ctx context.Context, s *outboxState) error {
	obj := s.obj
	var list kafkav1alpha1.IdempotentConsumerList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.Namespace)); err != nil {
		return fmt.Errorf("listing IdempotentConsumers: %w", err)
	}
	keep := obj.Retention()
	var short, ok, unknown []string
	for i := range list.Items {
		ic := &list.Items[i]
		topic := ic.Spec.Kafka.Topic
		if !slices.Contains(obj.Spec.Kafka.Topics, topic) || !ic.DeletionTimestamp.IsZero() {
			continue
		}
		info, known := s.mem.goodInfos[topic]
		if !known || !info.Exists || !info.RetentionKnown {
			unknown = append(unknown, fmt.Sprintf("%s (topic %q: its retention is not known yet)", ic.Name, topic))
			continue
		}
		have := ic.Retention()
		if info.Retention == InfiniteRetention {
			short = append(short, fmt.Sprintf("%s remembers event ids for %s, but topic %q keeps records forever (retention.ms -1 or compacted): a redelivery of any event can be applied again",
				ic.Name, have, topic))
			continue
		}
		need := keep + info.Retention
		if have < need {
			short = append(short, fmt.Sprintf("%s remembers event ids for %s, less than this outbox's retention %s plus topic %q's retention %s (%s): raise its spec.dedup.retention to at least %s",
				ic.Name, have, keep, topic, formatRetention(info.Retention), need, need))
			continue
		}
		ok = append(ok, fmt.Sprintf("%s (%s >= %s)", ic.Name, have, need))
	}
	cond := kafkav1alpha1.ConditionConsumerRetentionCovered
	switch {
	case len(short) > 0:
		msg := "IdempotentConsumer(s) of this namespace reading the outbox's topics may forget an event id before its last redelivery " +
			"(an event can be published up to the outbox retention after its id's time, then stays in the topic for the topic's retention): " +
			strings.Join(short, "; ")
		if obj.SetCondition(cond, metav1.ConditionFalse, kafkav1alpha1.ReasonConsumerRetentionShort, msg) || s.mem.warnedShort != msg {
			r.event(obj, corev1.EventTypeWarning, kafkav1alpha1.ReasonConsumerRetentionShort, actionCheckRetention, msg)
		}
		s.mem.warnedShort = msg
	case len(unknown) > 0:
		obj.SetCondition(cond, metav1.ConditionUnknown, kafkav1alpha1.ReasonTopicRetentionUnknown,
			"Cannot compare the dedup retention of "+strings.Join(unknown, ", "))
		s.mem.warnedShort = ""
	case len(ok) == 0:
		obj.SetCondition(cond, metav1.ConditionTrue, kafkav1alpha1.ReasonNoConsumers, fmt.Sprintf(
			"No IdempotentConsumer in namespace %s reads topic(s) %s; consumers elsewhere should remember event ids for this outbox's retention %s plus the topic's retention",
			obj.Namespace, quoteList(obj.Spec.Kafka.Topics), keep))
		s.mem.warnedShort = ""
	default:
		obj.SetCondition(cond, metav1.ConditionTrue, kafkav1alpha1.ReasonConsumerRetentionCovered,
			"The dedup retention of every IdempotentConsumer of this namespace reading the outbox's topics covers the outbox's retention plus the topic's: "+strings.Join(ok, ", "))
		s.mem.warnedShort = ""
	}
	return nil
}

// outboxRelay creates or updates the relay Deployment and reads its state
// into RelayReady.
func (r *OutboxReconciler) outboxRelay(ctx context.Context, s *outboxState) error {
	obj := s.obj
	fail := func(reason, message string, transient bool) {
		r.notReady(ctx, s, kafkav1alpha1.ConditionRelayReady, actionApplyRelay, reason, message, transient)
	}
	// The relay's credentials: read so a change rolls the pods (the config
	// hash is of the Secrets' resourceVersions, not their values).
	var versions []string
	for _, ref := range append([]kafkav1alpha1.SecretKeyRef{obj.RelayDatabaseURLRef()}, outboxKafkaSecretRefs(obj)...) {
		v, prob, err := r.secret(ctx, s, ref, false)
		if err != nil {
			return err
		}
		if prob != nil {
			fail(prob.reason, "A Secret the relay needs: "+prob.message, false)
			return nil
		}
		versions = append(versions, ref.Name+"/"+ref.Key+"@"+v.resourceVersion)
	}
	sum := sha256.Sum256([]byte(strings.Join(versions, "\x00")))
	desired := objects.RelayDeployment(obj, objects.Options{DefaultImage: r.Options.ConsumerImage, ConfigHash: hex.EncodeToString(sum[:12])})
	obj.Status.DeploymentName = desired.Name

	dep := &appsv1.Deployment{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), dep)
	// A new or changed template is first judged by the API server's Pod
	// Security admission (podsecurity.go): a refused one is not applied, and
	// a running relay keeps its template.
	if apierrors.IsNotFound(err) || err == nil && metav1.IsControlledBy(dep, obj) &&
		dep.Annotations[objects.AnnotationSpecHash] != desired.Annotations[objects.AnnotationSpecHash] {
		refused, derr := dryRunPod(ctx, r.Client, desired, "outbox relay")
		if derr != nil {
			return derr
		}
		if refused != nil {
			fail(refused.reason, refused.message, false)
			return nil
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, desired, client.FieldOwner(FieldOwner)); err != nil {
			if apierrors.IsAlreadyExists(err) {
				fail(kafkav1alpha1.ReasonDeploymentConflict, fmt.Sprintf("Deployment %q exists and is not controlled by this Outbox; delete it or rename the Outbox", desired.Name), false)
				return nil
			}
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				fail(kafkav1alpha1.ReasonDeploymentFailed, "Creating the relay Deployment was refused: "+err.Error(), true)
				return nil
			}
			return fmt.Errorf("creating Deployment %s: %w", desired.Name, err)
		}
		r.event(obj, corev1.EventTypeNormal, ReasonDeploymentCreated, actionApplyRelay, fmt.Sprintf("Created the relay Deployment %s (%d replicas)", desired.Name, obj.RelayReplicas()))
		dep = desired
	case err != nil:
		return fmt.Errorf("reading Deployment %s: %w", desired.Name, err)
	case !metav1.IsControlledBy(dep, obj):
		fail(kafkav1alpha1.ReasonDeploymentConflict, fmt.Sprintf("Deployment %q exists and is not controlled by this Outbox; delete it or rename the Outbox", desired.Name), false)
		return nil
	case dep.Annotations[objects.AnnotationSpecHash] != desired.Annotations[objects.AnnotationSpecHash]:
		dep.Labels = desired.Labels
		dep.Annotations = desired.Annotations
		dep.Spec = desired.Spec
		if err := r.Client.Update(ctx, dep, client.FieldOwner(FieldOwner)); err != nil {
			if apierrors.IsConflict(err) {
				s.wake(time.Second)
				return nil
			}
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				fail(kafkav1alpha1.ReasonDeploymentFailed, "Updating the relay Deployment was refused: "+err.Error(), true)
				return nil
			}
			return fmt.Errorf("updating Deployment %s: %w", desired.Name, err)
		}
	}
	obj.Status.Replicas = dep.Status.Replicas
	obj.Status.ReadyReplicas = dep.Status.ReadyReplicas
	want := obj.RelayReplicas()
	switch {
	case want == 0:
		fail(kafkav1alpha1.ReasonRelayScaledToZero, "spec.relay.replicas is 0: nothing publishes the outbox, and its backlog grows", false)
	case dep.Status.ObservedGeneration < dep.Generation || dep.Status.AvailableReplicas == 0:
		r.progressing(s, kafkav1alpha1.ReasonDeploymentProgressing, fmt.Sprintf("Waiting for the relay Deployment %s: %d of %d replicas available",
			dep.Name, dep.Status.AvailableReplicas, want))
	default:
		obj.SetCondition(kafkav1alpha1.ConditionRelayReady, metav1.ConditionTrue, kafkav1alpha1.ReasonDeploymentAvailable, fmt.Sprintf(
			"Relay Deployment %s: %d of %d replicas available (one owns the stream, the others stand by)", dep.Name, dep.Status.AvailableReplicas, want))
	}
	return nil
}

// progressing records a wait (no Event, no backoff): the Deployment watch
// brings the object back.
func (r *OutboxReconciler) progressing(s *outboxState, reason, message string) {
	s.obj.SetCondition(kafkav1alpha1.ConditionRelayReady, metav1.ConditionFalse, reason, message)
	s.problems = append(s.problems, problem{reason, message})
}
