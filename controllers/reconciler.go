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
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// ControllerName names the controller, its field manager and its events.
const ControllerName = "idempotentconsumer"

// FieldOwner is the server-side apply field manager of the operator.
const FieldOwner = "idempotency-operator"

// Finalizer is set only while deletionPolicy is Delete: it holds the object
// until its table is dropped.
const Finalizer = "kafka.idempotency.dev/drop-table"

// Options are the reconciler's tunables; zero values mean the defaults.
type Options struct {
	// ConsumerImage is used when spec.consumer.image is empty.
	ConsumerImage string
	// MaintenanceLead is how long before a partition boundary maintenance
	// runs (and how far ahead it plans); default 5m.
	MaintenanceLead time.Duration
	// MaxRequeue caps the wait until the next scheduled reconcile, so a
	// missed event is corrected eventually; default 24h.
	MaxRequeue time.Duration
	// RetryBase and RetryMax bound the exponential backoff after a failure
	// that retrying can fix (database down, lock busy); defaults 5s and 5m.
	RetryBase, RetryMax time.Duration
	// DatabaseTimeout bounds the database work of one reconcile; default 60s.
	DatabaseTimeout time.Duration
	// MaxConcurrentReconciles; default DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// TopicRefresh is how long what the brokers said about an object's topics
	// is reused, and how long "KEDA is not installed" is believed, before the
	// next reconcile asks again; default 5m. It schedules no reconcile of its
	// own.
	TopicRefresh time.Duration
	// KafkaTimeout bounds one look at the brokers; default 10s.
	KafkaTimeout time.Duration
	// TopicCheckInterval is how long after a successful look at the brokers
	// the object is reconciled again to look once more (a changed
	// retention.ms or partition count is noticed within it); default 1h,
	// negative disables these periodic rechecks.
	TopicCheckInterval time.Duration
	// TopicRetryBase and TopicRetryMax bound the backoff after a look at the
	// brokers that could not tell or found a problem (broker unreachable,
	// topic or dead-letter topic missing, access denied): the object is
	// reconciled again after TopicRetryBase, doubling up to TopicRetryMax,
	// until a look succeeds; defaults 2s and 20s, so a topic created after
	// the object turns it Ready within about 20s (issue 33).
	TopicRetryBase, TopicRetryMax time.Duration
	// MaxConcurrentTemplateUpgrades bounds the consumer Deployments rolling
	// out a pod template change the operator made (not the spec) at once:
	// a count or a percentage of the consumer Deployments (rollout.go);
	// "0" applies such changes only with the next spec change. Default 10%.
	MaxConcurrentTemplateUpgrades string
	// DatabaseHostAllowlist, when not empty, lists the only database hosts
	// the operator connects to; a URL naming another host is refused with
	// DatabaseHostNotAllowed, without dialing (hostallow.go).
	DatabaseHostAllowlist HostAllowlist
	// ConfigHashKeyNamespace and ConfigHashKeySecret name the Secret holding
	// the key of the pod template's config hash (confighash.go), created by
	// the manager when absent; defaults ConfigHashKeyNamespace() and
	// DefaultConfigHashKeySecret.
	ConfigHashKeyNamespace, ConfigHashKeySecret string
}

// DefaultTopicRetryBase and DefaultTopicRetryMax are the defaults of
// Options.TopicRetryBase and TopicRetryMax.
const (
	DefaultTopicRetryBase = 2 * time.Second
	DefaultTopicRetryMax  = 20 * time.Second
)

func (o Options) withDefaults() Options {
	if o.ConsumerImage == "" {
		o.ConsumerImage = objects.DefaultConsumerImage
	}
	if o.MaintenanceLead <= 0 {
		o.MaintenanceLead = 5 * time.Minute
	}
	if o.MaxRequeue <= 0 {
		o.MaxRequeue = 24 * time.Hour
	}
	if o.RetryBase <= 0 {
		o.RetryBase = 5 * time.Second
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Minute
	}
	if o.RetryMax < o.RetryBase {
		o.RetryMax = o.RetryBase
	}
	if o.DatabaseTimeout <= 0 {
		o.DatabaseTimeout = 60 * time.Second
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if o.TopicRefresh <= 0 {
		o.TopicRefresh = 5 * time.Minute
	}
	if o.KafkaTimeout <= 0 {
		o.KafkaTimeout = 10 * time.Second
	}
	if o.TopicCheckInterval == 0 {
		o.TopicCheckInterval = time.Hour
	}
	if o.TopicRetryBase <= 0 {
		o.TopicRetryBase = DefaultTopicRetryBase
	}
	if o.TopicRetryMax <= 0 {
		o.TopicRetryMax = DefaultTopicRetryMax
	}
	if o.TopicRetryMax < o.TopicRetryBase {
		o.TopicRetryMax = o.TopicRetryBase
	}
	if o.MaxConcurrentTemplateUpgrades == "" {
		o.MaxConcurrentTemplateUpgrades = DefaultMaxConcurrentTemplateUpgrades
	}
	if o.ConfigHashKeyNamespace == "" {
		o.ConfigHashKeyNamespace = ConfigHashKeyNamespace()
	}
	if o.ConfigHashKeySecret == "" {
		o.ConfigHashKeySecret = DefaultConfigHashKeySecret
	}
	return o
}

// IdempotentConsumerReconciler reconciles IdempotentConsumer objects.
type IdempotentConsumerReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads Secrets (which are not cached, only their metadata is
	// watched) and checks for Deployments the cache does not hold.
	APIReader client.Reader
	// Stores opens the TableStore of a database URL and table.
	Stores StoreOpener
	// Recorder emits Kubernetes Events; nil disables them.
	Recorder events.EventRecorder
	// Clock is injectable so tests can move time past partition boundaries.
	Clock clock.PassiveClock
	// Topics reads topic metadata and configuration from the brokers; nil
	// means KafkaAdmin with Options.KafkaTimeout.
	Topics TopicInspector
	// Options are the tunables.
	Options Options

	backoff    *backoff
	rollout    *templateGate
	topicCache topicCache
	keda       kedaDetector
	hasher     configHasher
	released   releaseChecks // platforms_release.go
}

// +kubebuilder:rbac:groups=kafka.idempotency.dev,resources=idempotentconsumers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kafka.idempotency.dev,resources=idempotentconsumers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kafka.idempotency.dev,resources=idempotentconsumers/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile runs the phases for one object: deletion or finalizer, then
// database, partitions and consumer, then one status write if anything
// changed. Expected waits and database failures end up in status with a
// RequeueAfter; only API-server failures are returned as errors.
func (r *IdempotentConsumerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &kafkav1alpha1.IdempotentConsumer{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("idempotentConsumer", klog.KObj(obj)))

	if !obj.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, obj)
	}
	if err := r.reconcileFinalizer(ctx, obj); err != nil {
		return ctrl.Result{}, err
	}

	// platforms.go: CloudNativePG and Strimzi references become the
	// ordinary refs, in memory, before anything reads them.
	platformStatus := obj.Status.Platform.DeepCopy()
	platformProb, kafkaWait, err := r.resolvePlatforms(ctx, obj, !obj.Spec.Suspend)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !obj.Spec.Suspend && consumerPlatform(obj).used() {
		// It may have written a KafkaUser or derived keys, perhaps during a
		// wait that skips the release phase: that phase looks again.
		r.released.forget(req.NamespacedName)
	}
	orig := obj.DeepCopy()
	orig.Status.Platform = platformStatus
	s := &reconcileState{obj: obj, now: r.Clock.Now()}
	if obj.Spec.Suspend {
		// Before any platform wait: a suspended object writes nothing, so
		// an object it would wait for (a KafkaUser it does not write while
		// suspended) is not its state.
		r.markSuspended(s)
		if r.rollout != nil {
			// No Deployment changes while suspended: not a waiter to wake
			// or to count (the alert on stuck upgrades would fire).
			r.rollout.finished(req.NamespacedName)
		}
		return r.finish(ctx, orig, s)
	}
	databasePhases := []func(context.Context, *reconcileState) error{
		r.reconcileReplaySummary, // replaysummary.go
		r.reconcileDatabase,
		r.reconcileSharing, // sharing.go
		r.reconcileRoles,
		r.reconcilePartitions,
		r.reconcileApplicationSecret, // appsecret.go
	}
	kafkaPhases := []func(context.Context, *reconcileState) error{
		r.decideAutoscaling,
		r.reconcileTopics,
		r.reconcileWorkload, // tableonly.go: the Deployment, or none without spec.consumer
		r.reconcileAutoscaling,
		r.releasePlatformObjects, // platforms_release.go
	}
	if platformProb != nil {
		s.retry(platformProb.reason, platformProb.message)
		s.requeue(platformPollInterval)
		if !kafkaWait {
			return r.finish(ctx, orig, s)
		}
		// A Kafka wait (a KafkaUser not Ready: Strimzi's User Operator
		// says so while the brokers are down) holds only the Kafka side:
		// the Deployment keeps its template, and partitions are still
		// premade and dropped and roles granted, as for a broker that is
		// down without Strimzi (other writers of a table do not wait for
		// Kafka). KafkaReady says why too: a database problem found
		// meanwhile may take Ready.
		obj.SetCondition(kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, platformProb.reason, platformProb.message)
		kafkaPhases = nil
	}
	for _, phase := range append(databasePhases, kafkaPhases...) {
		if err := phase(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.finish(ctx, orig, s)
}

// reconcileState is what one Reconcile observed and decided, phase by phase.
type reconcileState struct {
	obj *kafkav1alpha1.IdempotentConsumer
	now time.Time

	// database phase
	store        TableStore
	databaseURL  secretValue
	databaseOK   bool
	secrets      []string // values to scrub from messages
	stalled      *problem // the first problem no retry can fix
	transient    *problem // the first problem a retry may fix
	progressing  *problem // a wait that is neither (rollout in progress)
	partitionsOK bool
	consumerOK   bool
	// shared is a shared table's effective policy, registered this reconcile.
	shared *sharedPolicy

	// secretValues are the Secret keys read this reconcile.
	secretValues map[kafkav1alpha1.SecretKeyRef]secretValue
	// topicPartitions is the topic's partition count, 0 when unknown.
	topicPartitions int32
	// autoscale: KEDA owns the Deployment's replica count this reconcile;
	// scaledObject is the ScaledObject as read before applying.
	autoscale    bool
	scaledObject *unstructured.Unstructured
	// deploymentExists: the consumer Deployment exists after this reconcile.
	deploymentExists bool

	// requeueAfter is the soonest wake-up any phase asked for; 0 means none.
	requeueAfter time.Duration
}

// problem is one reason the object is not Ready.
type problem struct {
	reason, message string
}

func (s *reconcileState) requeue(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if s.requeueAfter == 0 || d < s.requeueAfter {
		s.requeueAfter = d
	}
}

func (s *reconcileState) stall(reason, message string) {
	if s.stalled == nil {
		s.stalled = &problem{reason, message}
	}
}

func (s *reconcileState) retry(reason, message string) {
	if s.transient == nil {
		s.transient = &problem{reason, message}
	}
}

func (s *reconcileState) wait(reason, message string) {
	if s.progressing == nil {
		s.progressing = &problem{reason, message}
	}
}

// SetupWithManager registers the reconciler, its index and its watches.
func (r *IdempotentConsumerReconciler) SetupWithManager(mgr ctrl.Manager) error {
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
	if r.Stores == nil {
		return fmt.Errorf("setting up the %s controller: no StoreOpener", ControllerName)
	}
	r.backoff = newBackoff(r.Options.RetryBase, r.Options.RetryMax)
	if r.Topics == nil {
		r.Topics = KafkaAdmin{Timeout: r.Options.KafkaTimeout}
	}
	maxUpgrades, err := ParseMaxConcurrentTemplateUpgrades(r.Options.MaxConcurrentTemplateUpgrades)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: MaxConcurrentTemplateUpgrades: %w", ControllerName, err)
	}
	r.rollout = newTemplateGate(maxUpgrades, r.Client)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &kafkav1alpha1.IdempotentConsumer{},
		secretRefIndex, indexSecretRefs); err != nil {
		return fmt.Errorf("indexing IdempotentConsumers by Secret: %w", err)
	}
	if err := exportObjectMetrics(mgr); err != nil { // metrics.go
		return fmt.Errorf("setting up the %s controller: %w", ControllerName, err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&kafkav1alpha1.IdempotentConsumer{}, builder.WithPredicates(specOrDeletionChanged())).
		Owns(&appsv1.Deployment{}).
		// By name as well: a Deployment whose owner reference names no
		// object (orphaned by a delete with --cascade=orphan) blocks the
		// object of the same name until it goes, and its deletion must wake
		// that object up.
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(consumerForDeployment)).
		Watches(&kafkav1alpha1.DeadLetterReplay{}, handler.EnqueueRequestsFromMapFunc(consumerForReplay)).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.consumersForSecret)).
		// The application Secrets (appsecret.go): one deleted or edited is put back.
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(),
			&kafkav1alpha1.IdempotentConsumer{}, handler.OnlyControllerOwner())).
		WatchesRawSource(source.Channel(r.rollout.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.MaxConcurrentReconciles}).
		Complete(r)
}

// consumerForDeployment maps one of the operator's Deployments (the cache
// holds no others) to the object its name belongs to, owner or not.
func consumerForDeployment(_ context.Context, dep client.Object) []ctrl.Request {
	name, ok := objects.ConsumerNameOf(dep.GetName())
	if !ok {
		return nil
	}
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: dep.GetNamespace(), Name: name}}}
}

// specOrDeletionChanged passes creations, deletions, and updates that change
// the generation (spec, deletion), annotations or labels: the operator's own
// status writes and finalizer patches do not wake it up again.
func specOrDeletionChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld == nil || e.ObjectNew == nil {
				return true
			}
			return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
				!e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp()) ||
				!mapsEqual(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()) ||
				!mapsEqual(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// forget drops the per-object memory (backoff, topics, rollout slot) of a
// deleted object; its metrics series go with it from the cache.
func (r *IdempotentConsumerReconciler) forget(key types.NamespacedName) {
	if r.backoff != nil {
		r.backoff.reset(key)
	}
	r.topicCache.forget(key)
	if r.rollout != nil {
		r.rollout.finished(key)
	}
	r.released.drop(key)
}
