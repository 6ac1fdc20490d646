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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

// testEnv is an envtest API server with the CRD installed and a manager
// running the reconciler against it, plus a stand-in for the Deployment
// controller (envtest runs no controllers, so nothing would ever make a
// Deployment available).
type testEnv struct {
	cfg    *envtest.Environment
	c      client.Client // uncached, for the test's own reads and writes
	clock  *clocktesting.FakePassiveClock
	r      *IdempotentConsumerReconciler
	stores *PoolCache
	logs   *consumertest.SyncBuffer
	// cached reads from the test manager's cache (the reconciler's, when it
	// runs in this process).
	cached client.Client
	// deploymentsAvailable makes the stand-in Deployment controller report
	// every Deployment as rolled out; clear it to keep them progressing.
	deploymentsAvailable atomic.Bool
	// stopManager stops the manager and waits for it (once; later calls do
	// nothing), so a test can start another one (startManager) on the same
	// API server, as an operator upgrade does.
	stopManager func()
	logger      logr.Logger
}

type envOptions struct {
	realClock bool
	// discardLogs drops the manager's log instead of keeping it in te.logs
	// (the benchmark: a log kept in memory would count in its peak RSS).
	discardLogs bool
	// noReconciler starts the manager with the stand-in Deployment
	// controller only: the operator runs elsewhere (the benchmark runs
	// cmd/manager as a process of its own).
	noReconciler bool
	options      Options
	pool         PoolOptions
	// topics replaces the KafkaAdmin the reconciler asks the brokers with.
	topics TopicInspector
	// watchNamespaces restricts the manager's cache (CacheOptions).
	watchNamespaces []string
	// managerUser, when set, runs the manager as that user (impersonated),
	// after setup has run with the admin client (to install its RBAC).
	managerUser string
	setup       func(t *testing.T, c client.Client)
	// apiServerArgs are extra kube-apiserver flags (name, values).
	apiServerArgs map[string][]string
	// leaderElectionNamespace, when set, turns leader election on with its
	// Lease there.
	leaderElectionNamespace string
	// wrapStores, when set, wraps the PoolCache the reconciler opens stores
	// with (the benchmark times the database calls).
	wrapStores func(StoreOpener) StoreOpener
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := kafkav1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// kubebuilderAssets finds kube-apiserver and etcd: KUBEBUILDER_ASSETS, or
// the cached build of hack/envtest.sh (which builds it on first use).
func kubebuilderAssets(t testing.TB) string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	cmd := exec.Command(filepath.Join("..", "hack", "envtest.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("no KUBEBUILDER_ASSETS and hack/envtest.sh failed: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func startEnv(t *testing.T, eo envOptions) *testEnv {
	t.Helper()
	te := &testEnv{logs: &consumertest.SyncBuffer{}}
	te.deploymentsAvailable.Store(true)
	te.cfg = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: kubebuilderAssets(t),
	}
	for name, values := range eo.apiServerArgs {
		te.cfg.ControlPlane.GetAPIServer().Configure().Set(name, values...)
	}
	start := time.Now()
	restCfg, err := te.cfg.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := te.cfg.Stop(); err != nil {
			t.Logf("stopping envtest: %v", err)
		}
	})
	t.Logf("envtest started in %s", time.Since(start).Round(time.Millisecond))
	restCfg.QPS, restCfg.Burst = 500, 1000

	te.c, err = client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// What `make install` installs beside the CRDs (config/crd): the API
	// server's warning on a lower retention.
	installManifests(t, te.c, filepath.Join("..", "config", "crd", "retention_decrease_warning.yaml"))

	var logOut io.Writer = te.logs
	if eo.discardLogs {
		logOut = io.Discard
	}
	if os.Getenv("OPERATOR_TEST_LOGS") != "" {
		logOut = io.MultiWriter(te.logs, os.Stderr)
	}
	te.logger = zap.New(zap.WriteTo(logOut), zap.UseDevMode(false))
	ctrl.SetLogger(te.logger)

	if eo.setup != nil {
		eo.setup(t, te.c)
	}
	te.startManager(t, restCfg, eo)
	return te
}

// startManager starts a manager running the reconciler (te.r) and the
// stand-in Deployment controller against the API server of restCfg, and
// waits for its cache; te.stopManager stops it (t's cleanup does too).
func (te *testEnv) startManager(t *testing.T, restCfg *rest.Config, eo envOptions) {
	t.Helper()
	logger := te.logger
	mgrCfg := restCfg
	if eo.managerUser != "" {
		mgrCfg = rest.CopyConfig(restCfg)
		mgrCfg.Impersonate = rest.ImpersonationConfig{UserName: eo.managerUser}
	}
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                  scheme,
		Logger:                  logger,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                   CacheOptions(eo.watchNamespaces),
		LeaderElection:          eo.leaderElectionNamespace != "",
		LeaderElectionNamespace: eo.leaderElectionNamespace,
		LeaderElectionID:        "idempotency-operator.kafka.idempotency.dev",
		Client:                  ClientOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	pool := eo.pool
	if pool.MaxConns == 0 {
		pool = PoolOptions{MaxConns: 4, ConnectTimeout: 2 * time.Second}
	}
	te.stores = NewPoolCache(pool)
	t.Cleanup(te.stores.Close)
	opts := eo.options
	if opts.RetryBase == 0 {
		opts.RetryBase, opts.RetryMax = 100*time.Millisecond, time.Second
	}
	if opts.MaxRequeue == 0 {
		opts.MaxRequeue = 30 * 24 * time.Hour // let the schedule alone decide
	}
	var stores StoreOpener = te.stores
	if eo.wrapStores != nil {
		stores = eo.wrapStores(stores)
	}
	topics := eo.topics
	if topics == nil {
		topics = clusterBrokers{inner: KafkaAdmin{Timeout: opts.KafkaTimeout}}
	}
	te.r = &IdempotentConsumerReconciler{
		Stores:   stores,
		Recorder: mgr.GetEventRecorder("idempotency-operator"),
		Topics:   topics,
		Options:  opts,
	}
	if !eo.realClock && te.clock != nil {
		te.r.Clock = te.clock // a second manager: the time goes on
	} else if !eo.realClock {
		// Noon UTC, so a test's "now plus the lead" stays in the same day.
		te.clock = clocktesting.NewFakePassiveClock(time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour))
		te.r.Clock = te.clock
	} else {
		te.r.Clock = clock.RealClock{}
	}
	if eo.noReconciler {
		te.r = nil
	} else if err := te.r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	} else if err := (&DeadLetterReplayReconciler{
		Recorder:      mgr.GetEventRecorder("idempotency-operator"),
		Clock:         te.r.Clock,
		ConsumerImage: te.r.Options.ConsumerImage,
	}).SetupWithManager(mgr); err != nil {
		t.Fatal(err) // as cmd/manager does: every controller in one manager
	} else if err := (&OutboxReconciler{
		Pools:         te.stores,
		Recorder:      mgr.GetEventRecorder("idempotency-operator"),
		Clock:         te.r.Clock,
		Topics:        topics,
		Options:       opts,
		StatsInterval: time.Second,
	}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	te.cached = mgr.GetClient()
	fakeClient := mgr.GetClient()
	if eo.managerUser != "" {
		fakeClient = te.c // Deployment status is kube-controller-manager's, not the operator's, to write
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("fake-deployment-controller").
		For(&appsv1.Deployment{}).Complete(&fakeDeploymentController{c: fakeClient, on: &te.deploymentsAvailable}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	var once sync.Once
	te.stopManager = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(time.Minute): // a manager whose watches are refused may not stop
				t.Error("the manager did not stop within 1m")
			}
		})
	}
	t.Cleanup(te.stopManager)
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		t.Fatalf("cache did not sync within 1m (a watch refused?); manager log:\n%s", te.logs.String())
	}
}

// installManifests creates every object of the YAML files (documents
// separated by ---), as kubectl apply would.
func installManifests(t *testing.T, c client.Client, files ...string) {
	t.Helper()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("decoding %s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := c.Create(context.Background(), u); err != nil {
				t.Fatalf("creating %s %s from %s: %v", u.GetKind(), u.GetName(), f, err)
			}
		}
	}
}

// clusterBrokers stands in for the brokers of a real cluster, as
// fakeDeploymentController stands in for kube-controller-manager: the
// objects of most tests name brokers that resolve only inside a cluster
// (kafka-0.kafka:9092 from newConsumer, kafka.kafka.svc:9092 from the
// samples), and a consumer object is Ready only when its topics exist
// (KafkaReady). For such addresses it answers that every topic exists, with
// 64 partitions and a retention of 1h (covered by any dedup retention); any
// other address (a kfake broker on 127.0.0.1, an address that must fail) is
// asked for real. The tests of the Kafka checks (topics_test.go,
// kafkaready_test.go, topic_recheck_test.go, dialstatus_test.go) use real
// brokers.
type clusterBrokers struct {
	inner TopicInspector
}

func (c clusterBrokers) Inspect(ctx context.Context, conn KafkaConnection, topics ...string) (map[string]TopicInfo, error) {
	for _, b := range conn.Brokers {
		host, _, _ := strings.Cut(b, ":")
		if host != "kafka" && !strings.HasSuffix(host, ".kafka") && !strings.HasSuffix(host, ".svc") {
			return c.inner.Inspect(ctx, conn, topics...)
		}
	}
	out := make(map[string]TopicInfo, len(topics))
	for _, t := range topics {
		out[t] = TopicInfo{Exists: true, Partitions: 64, Retention: time.Hour, RetentionKnown: true}
	}
	return out, nil
}

// fakeDeploymentController stands in for kube-controller-manager: it reports
// each Deployment as fully rolled out.
type fakeDeploymentController struct {
	c  client.Client
	on *atomic.Bool
}

func (f *fakeDeploymentController) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !f.on.Load() {
		return ctrl.Result{}, nil
	}
	dep := &appsv1.Deployment{}
	if err := f.c.Get(ctx, req.NamespacedName, dep); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	n := ptr.Deref(dep.Spec.Replicas, 1)
	want := appsv1.DeploymentStatus{
		ObservedGeneration: dep.Generation,
		Replicas:           n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
			LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
	}
	if dep.Status.ObservedGeneration == want.ObservedGeneration && dep.Status.AvailableReplicas == n && dep.Status.Replicas == n {
		return ctrl.Result{}, nil
	}
	dep.Status = want
	return ctrl.Result{}, client.IgnoreNotFound(f.c.Status().Update(ctx, dep))
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// namespace creates a fresh namespace for one test.
func (te *testEnv) namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + randSuffix()}}
	if err := te.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func (te *testEnv) secret(t testing.TB, ns, name string, data map[string]string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	if err := te.c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (te *testEnv) setSecret(t testing.TB, ns, name string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	s.Data = nil
	s.StringData = data
	if err := te.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// newConsumer builds an object with the smallest valid spec, then applies mods.
func newConsumer(ns, name string, mods ...func(*kafkav1alpha1.IdempotentConsumer)) *kafkav1alpha1.IdempotentConsumer {
	obj := &kafkav1alpha1.IdempotentConsumer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kafkav1alpha1.IdempotentConsumerSpec{
			Kafka: kafkav1alpha1.KafkaSpec{
				BootstrapServers: []string{"kafka-0.kafka:9092"},
				Topic:            "orders",
				GroupID:          "orders-writer",
			},
			Database: kafkav1alpha1.DatabaseSpec{
				URLSecretRef: kafkav1alpha1.SecretKeyRef{Name: "db", Key: "url"},
			},
			Consumer: kafkav1alpha1.ConsumerSpec{Sink: kafkav1alpha1.SinkSpec{Type: kafkav1alpha1.SinkLog}},
		},
	}
	for _, m := range mods {
		m(obj)
	}
	return obj
}

func withRetention(d time.Duration) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Dedup.Retention = &metav1.Duration{Duration: d} }
}

func withPremake(n int32) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Dedup.Premake = n }
}

func withTable(name string) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.Table = name }
}

func withDeletionPolicy(p kafkav1alpha1.DeletionPolicy) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.DeletionPolicy = p }
}

func (te *testEnv) create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := te.c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (te *testEnv) get(t testing.TB, ns, name string) *kafkav1alpha1.IdempotentConsumer {
	t.Helper()
	obj := &kafkav1alpha1.IdempotentConsumer{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("getting %s/%s: %v", ns, name, err)
	}
	return obj
}

// update re-reads the object, applies mutate and writes it, retrying on
// conflicts with the operator's own writes.
func (te *testEnv) update(t testing.TB, ns, name string, mutate func(*kafkav1alpha1.IdempotentConsumer)) error {
	t.Helper()
	return updateObject(te, &kafkav1alpha1.IdempotentConsumer{}, ns, name, mutate)
}

// updateObject reads the object ns/name into obj, applies mutate and writes
// it, retrying on conflicts with the operator's own writes (a finalizer, a
// status); any other answer, a refusal by validation included, is returned.
func updateObject[T client.Object](te *testEnv, obj T, ns, name string, mutate func(T)) error {
	key := types.NamespacedName{Namespace: ns, Name: name}
	for range 10 {
		if err := te.c.Get(context.Background(), key, obj); err != nil {
			return err
		}
		mutate(obj)
		err := te.c.Update(context.Background(), obj)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("update of %s/%s kept conflicting", ns, name)
}

// poke makes the manager reconcile the object now (an annotation change
// passes the controller's predicate).
func (te *testEnv) poke(t testing.TB, ns, name string) {
	t.Helper()
	if err := te.update(t, ns, name, func(o *kafkav1alpha1.IdempotentConsumer) {
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		o.Annotations["test.idempotency.dev/poke"] = randSuffix()
	}); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it returns true or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCondition waits until the object has the condition with that status
// and reason for its current generation, and returns the object.
func (te *testEnv) waitCondition(t testing.TB, ns, name, condType string, status metav1.ConditionStatus, reason string) *kafkav1alpha1.IdempotentConsumer {
	t.Helper()
	var obj *kafkav1alpha1.IdempotentConsumer
	eventually(t, 30*time.Second, fmt.Sprintf("%s/%s %s=%s (%s)", ns, name, condType, status, reason), func() (bool, string) {
		obj = te.get(t, ns, name)
		c := meta.FindStatusCondition(obj.Status.Conditions, condType)
		if c == nil {
			return false, conditionsSummary(obj)
		}
		ok := c.Status == status && (reason == "" || c.Reason == reason) &&
			c.ObservedGeneration == obj.Generation && obj.Status.ObservedGeneration == obj.Generation
		return ok, conditionsSummary(obj)
	})
	return obj
}

func (te *testEnv) waitReady(t testing.TB, ns, name string) *kafkav1alpha1.IdempotentConsumer {
	t.Helper()
	return te.waitCondition(t, ns, name, kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
}

func conditionsSummary(obj *kafkav1alpha1.IdempotentConsumer) string {
	var parts []string
	for _, c := range obj.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s/%s(gen %d): %s", c.Type, c.Status, c.Reason, c.ObservedGeneration, c.Message))
	}
	return fmt.Sprintf("generation %d observed %d; %s", obj.Generation, obj.Status.ObservedGeneration, strings.Join(parts, "; "))
}

// events lists the Events about an IdempotentConsumer.
func (te *testEnv) events(t testing.TB, ns, name string) []eventsv1.Event {
	t.Helper()
	return te.eventsOf(t, ns, "IdempotentConsumer", name)
}

// eventsOf lists the Events about an object of a kind.
func (te *testEnv) eventsOf(t testing.TB, ns, kind, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := te.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// hasEvents waits up to 10 s for Events of each of reasons about the
// IdempotentConsumer ns/name (the recorder writes them asynchronously, after
// the status or deletion a test observes) and reports whether all came.
func (te *testEnv) hasEvents(t testing.TB, ns, name string, reasons ...string) bool {
	t.Helper()
	return te.hasEventsOf(t, ns, "IdempotentConsumer", name, reasons...)
}

// hasEventsOf: hasEvents for an object of a kind.
func (te *testEnv) hasEventsOf(t testing.TB, ns, kind, name string, reasons ...string) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		evs := te.eventsOf(t, ns, kind, name)
		all := true
		for _, r := range reasons {
			all = all && hasEvent(evs, r)
		}
		if all || time.Now().After(deadline) {
			return all
		}
	}
}

func hasEvent(evs []eventsv1.Event, reason string) bool {
	for _, e := range evs {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

// pgConn connects to a test database.
func pgConn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting to the test database: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// partitions lists the partitions attached to schema.table, by name.
func partitions(t testing.TB, conn *pgx.Conn, schema, table string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1)
		ORDER BY c.relname`, pgx.Identifier{schema, table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func tableExists(t testing.TB, conn *pgx.Conn, schema, table string) bool {
	t.Helper()
	var ok bool
	if err := conn.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`,
		pgx.Identifier{schema, table}.Sanitize()).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}
