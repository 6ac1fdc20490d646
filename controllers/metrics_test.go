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
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// objectSeries gathers the manager's registry (where the operator's metrics
// are registered) and keeps only the series of one object, so tests are not
// disturbed by other objects' series in the same process.
func objectSeries(namespace, name string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		families, err := metrics.Registry.Gather()
		if err != nil {
			return nil, err
		}
		var out []*dto.MetricFamily
		for _, f := range families {
			var keep []*dto.Metric
			for _, m := range f.GetMetric() {
				var ns, n string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "namespace":
						ns = l.GetValue()
					case "name":
						n = l.GetValue()
					}
				}
				if ns == namespace && n == name {
					keep = append(keep, m)
				}
			}
			if len(keep) > 0 {
				out = append(out, &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Metric: keep})
			}
		}
		return out, nil
	})
}

// conditionSeries returns an object's status_condition series as
// "Type/Status" -> value.
func conditionSeries(t testing.TB, namespace, name string) map[string]float64 {
	t.Helper()
	families, err := objectSeries(namespace, name).Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != MetricStatusCondition {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["type"]+"/"+labels["status"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// expectConditions renders the exposition text of one object's
// status_condition series: for each type, 1 on its status, 0 on the others.
func expectConditions(namespace, name string, conds map[string]metav1.ConditionStatus) string {
	var b strings.Builder
	b.WriteString("# HELP " + MetricStatusCondition + " " + helpStatusCondition + "\n")
	b.WriteString("# TYPE " + MetricStatusCondition + " gauge\n")
	for typ, status := range conds {
		for _, st := range conditionStatuses {
			v := 0
			if st == status {
				v = 1
			}
			fmt.Fprintf(&b, "%s{name=%q,namespace=%q,status=%q,type=%q} %d\n", MetricStatusCondition, name, namespace, st, typ, v)
		}
	}
	return b.String()
}

// metricsEnv is an API server with the CRD and managers that run only the
// per-object metrics export (no reconciler): the test writes the status the
// series are computed from itself.
type metricsEnv struct {
	restCfg *rest.Config
	c       client.Client
	logs    *consumertest.SyncBuffer
}

func startMetricsEnv(t *testing.T) *metricsEnv {
	t.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: kubebuilderAssets(t),
	}
	restCfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping envtest: %v", err)
		}
	})
	restCfg.QPS, restCfg.Burst = 500, 1000
	me := &metricsEnv{restCfg: restCfg, logs: &consumertest.SyncBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("managers' log:\n%s", me.logs.String())
		}
	})
	if me.c, err = client.New(restCfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return me
}

// startManager starts a manager with the operator's cache options that runs
// exportObjectMetrics alone, as user (impersonated) unless empty, and
// returns its cache and the function that stops it and waits.
func (me *metricsEnv) startManager(t *testing.T, user string) (cached client.Reader, stop func()) {
	t.Helper()
	cfg := me.restCfg
	if user != "" {
		cfg = rest.CopyConfig(me.restCfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 zap.New(zap.WriteTo(me.logs)),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  CacheOptions(nil),
		Client:                 ClientOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := exportObjectMetrics(mgr); err != nil {
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
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Error("the manager did not stop within 1m")
			}
		})
	}
	t.Cleanup(stop)
	return mgr.GetCache(), stop
}

func (me *metricsEnv) namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metrics-" + randSuffix()}}
	if err := me.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// writeStatus writes obj's status as a reconcile does (observedGeneration
// set to the generation it was computed for); obj is updated in place.
func (me *metricsEnv) writeStatus(t testing.TB, obj *kafkav1alpha1.IdempotentConsumer) {
	t.Helper()
	obj.Status.ObservedGeneration = obj.Generation
	if err := me.c.Status().Update(context.Background(), obj); err != nil {
		t.Fatalf("writing the status of %s: %v", obj.Name, err)
	}
}

// waitSeries waits until the object's series of the metric are those of
// the exposition text want ("" for none).
func waitSeries(t testing.TB, ns, name, metric, want string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%s of %s/%s", metric, ns, name), func() (bool, string) {
		err := testutil.GatherAndCompare(objectSeries(ns, name), strings.NewReader(want), metric)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// gaugeText renders one object's series of a (namespace, name) gauge.
func gaugeText(metric, help, ns, name string, v float64) string {
	return fmt.Sprintf("# HELP %s %s\n# TYPE %s gauge\n%s{name=%q,namespace=%q} %v\n", metric, help, metric, metric, name, ns, v)
}

const (
	helpReady           = "1 if the IdempotentConsumer's Ready condition is True, else 0."
	helpPartitions      = "Partitions attached to an IdempotentConsumer's table."
	helpPartitionsAhead = "Partitions of an IdempotentConsumer's table that lie wholly in the future: the margin if maintenance stopped now."
)

// TestObjectMetrics checks the per-object series against a real API server
// and the manager's cache: they follow the status the object has there, and
// go with the object, a condition, or the manager.
func TestObjectMetrics(t *testing.T) {
	me := startMetricsEnv(t)
	cached, stop := me.startManager(t, "")
	t.Run("Conditions", func(t *testing.T) { testConditionMetrics(t, me) })
	t.Run("Partitions", func(t *testing.T) { testPartitionMetrics(t, me) })
	t.Run("Deleting", func(t *testing.T) { testDeletingMetrics(t, me, cached) })
	t.Run("ThousandObjects", func(t *testing.T) { testThousandObjectsMetrics(t, me) })
	t.Run("CacheNotSynced", func(t *testing.T) { testMetricsCacheNotSynced(t, me) })
	t.Run("ManagerStopped", func(t *testing.T) {
		ns := me.namespace(t)
		obj := newConsumer(ns, "a")
		if err := me.c.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady, "")
		me.writeStatus(t, obj)
		waitSeries(t, ns, "a", MetricReady, gaugeText(MetricReady, helpReady, ns, "a", 1))
		stop()
		// A stopped manager's cache is no source any more.
		waitNoSeries(t, ns, "a")
	})
}

func testConditionMetrics(t *testing.T, me *metricsEnv) {
	ctx := context.Background()
	ns := me.namespace(t)
	obj := newConsumer(ns, "a")
	if err := me.c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	set := func(typ string, st metav1.ConditionStatus) {
		obj.SetCondition(typ, st, "Because", "test")
	}
	compare := func(name string, want map[string]metav1.ConditionStatus) {
		t.Helper()
		expected := ""
		if len(want) > 0 {
			expected = expectConditions(ns, name, want)
		}
		waitSeries(t, ns, name, MetricStatusCondition, expected)
	}

	// Not ready yet, reconciling, the brokers not reachable.
	set(kafkav1alpha1.ConditionReady, metav1.ConditionFalse)
	set(kafkav1alpha1.ConditionReconciling, metav1.ConditionTrue)
	set(kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionTrue)
	set(kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown)
	me.writeStatus(t, obj)
	compare("a", map[string]metav1.ConditionStatus{
		kafkav1alpha1.ConditionReady:                 metav1.ConditionFalse,
		kafkav1alpha1.ConditionReconciling:           metav1.ConditionTrue,
		kafkav1alpha1.ConditionDatabaseReady:         metav1.ConditionTrue,
		kafkav1alpha1.ConditionTopicRetentionCovered: metav1.ConditionUnknown,
	})
	waitSeries(t, ns, "a", MetricReady, gaugeText(MetricReady, helpReady, ns, "a", 0))

	// Ready; Reconciling is gone (kstatus: present only while True), so are
	// its series; the retention warning is now known and False.
	set(kafkav1alpha1.ConditionReady, metav1.ConditionTrue)
	meta.RemoveStatusCondition(&obj.Status.Conditions, kafkav1alpha1.ConditionReconciling)
	set(kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionFalse)
	me.writeStatus(t, obj)
	compare("a", map[string]metav1.ConditionStatus{
		kafkav1alpha1.ConditionReady:                 metav1.ConditionTrue,
		kafkav1alpha1.ConditionDatabaseReady:         metav1.ConditionTrue,
		kafkav1alpha1.ConditionTopicRetentionCovered: metav1.ConditionFalse,
	})
	waitSeries(t, ns, "a", MetricReady, gaugeText(MetricReady, helpReady, ns, "a", 1))

	// Another object; deleting the first removes only the first's series.
	other := newConsumer(ns, "b")
	if err := me.c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	other.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionTrue, "Ready", "")
	me.writeStatus(t, other)
	compare("b", map[string]metav1.ConditionStatus{kafkav1alpha1.ConditionReady: metav1.ConditionTrue})
	if err := me.c.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
	waitNoSeries(t, ns, "a")
	if got := conditionSeries(t, ns, "a"); len(got) != 0 {
		t.Errorf("series of a deleted object: %v", got)
	}
	compare("b", map[string]metav1.ConditionStatus{kafkav1alpha1.ConditionReady: metav1.ConditionTrue})

	// A deleted object that comes back starts from its conditions alone.
	obj = newConsumer(ns, "a")
	if err := me.c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	set(kafkav1alpha1.ConditionReady, metav1.ConditionUnknown)
	me.writeStatus(t, obj)
	compare("a", map[string]metav1.ConditionStatus{kafkav1alpha1.ConditionReady: metav1.ConditionUnknown})
	for _, o := range []*kafkav1alpha1.IdempotentConsumer{obj, other} {
		if err := me.c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitNoSeries(t, ns, "a")
	waitNoSeries(t, ns, "b")
}

func testPartitionMetrics(t *testing.T, me *metricsEnv) {
	ns := me.namespace(t)
	obj := newConsumer(ns, "p")
	if err := me.c.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	// Before the first successful maintenance: Ready, but no partitions
	// series (the old gauges were set only by maintenance).
	obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDatabaseUnreachable, "down")
	me.writeStatus(t, obj)
	waitSeries(t, ns, "p", MetricReady, gaugeText(MetricReady, helpReady, ns, "p", 0))
	waitSeries(t, ns, "p", MetricPartitions, "")
	waitSeries(t, ns, "p", MetricPartitionsAhead, "")

	obj.Status.Partitions = &kafkav1alpha1.PartitionsStatus{Count: 5, Ahead: 2, Oldest: "processed_event_p1", Newest: "processed_event_p5"}
	me.writeStatus(t, obj)
	waitSeries(t, ns, "p", MetricPartitions, gaugeText(MetricPartitions, helpPartitions, ns, "p", 5))
	waitSeries(t, ns, "p", MetricPartitionsAhead, gaugeText(MetricPartitionsAhead, helpPartitionsAhead, ns, "p", 2))

	// Maintenance stopped short of the premade margin.
	obj.Status.Partitions.Count, obj.Status.Partitions.Ahead = 3, 0
	me.writeStatus(t, obj)
	waitSeries(t, ns, "p", MetricPartitions, gaugeText(MetricPartitions, helpPartitions, ns, "p", 3))
	waitSeries(t, ns, "p", MetricPartitionsAhead, gaugeText(MetricPartitionsAhead, helpPartitionsAhead, ns, "p", 0))
}

// testDeletingMetrics follows an object held by the finalizer through its
// deletion, as delete.go writes its status.
func testDeletingMetrics(t *testing.T, me *metricsEnv, cached client.Reader) {
	ctx := context.Background()
	ns := me.namespace(t)
	obj := newConsumer(ns, "d", withDeletionPolicy(kafkav1alpha1.DeletionDelete))
	controllerutil.AddFinalizer(obj, Finalizer)
	if err := me.c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady, "")
	me.writeStatus(t, obj)
	waitSeries(t, ns, "d", MetricReady, gaugeText(MetricReady, helpReady, ns, "d", 1))

	// The deletion bumps the generation of an object with a finalizer; the
	// status still describes the previous one, whose Ready the old gauge kept
	// until the delete path wrote the next status. So does the collector.
	if err := me.c.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := me.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	if obj.Generation == obj.Status.ObservedGeneration {
		t.Logf("the deletion did not change the generation (%d)", obj.Generation)
	}
	eventually(t, 10*time.Second, "the cache sees the deletion", func() (bool, string) {
		got := &kafkav1alpha1.IdempotentConsumer{}
		if err := cached.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			t.Fatal(err)
		}
		return got.Generation == obj.Generation && !got.DeletionTimestamp.IsZero(), fmt.Sprint(got.Generation)
	})
	waitSeries(t, ns, "d", MetricReady, gaugeText(MetricReady, helpReady, ns, "d", 1))

	// Waiting for the database to drop the table (delete.go).
	obj.SetCondition(kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDatabaseUnreachable, "down")
	obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDeleting, "waiting")
	obj.SetCondition(kafkav1alpha1.ConditionReconciling, metav1.ConditionTrue, kafkav1alpha1.ReasonDeleting, "waiting")
	if err := me.c.Status().Update(ctx, obj); err != nil { // the delete path leaves observedGeneration alone
		t.Fatal(err)
	}
	waitSeries(t, ns, "d", MetricReady, gaugeText(MetricReady, helpReady, ns, "d", 0))
	waitSeries(t, ns, "d", MetricStatusCondition, expectConditions(ns, "d", map[string]metav1.ConditionStatus{
		kafkav1alpha1.ConditionReady:         metav1.ConditionFalse,
		kafkav1alpha1.ConditionDatabaseReady: metav1.ConditionFalse,
		kafkav1alpha1.ConditionReconciling:   metav1.ConditionTrue,
	}))

	// The finalizer removed: the object and its series are gone.
	controllerutil.RemoveFinalizer(obj, Finalizer)
	if err := me.c.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	waitNoSeries(t, ns, "d")
}

// testMetricsCacheNotSynced: a manager whose cache cannot sync (its user
// may not list IdempotentConsumers) exports nothing, and a scrape does not
// wait for it.
func testMetricsCacheNotSynced(t *testing.T, me *metricsEnv) {
	ns := me.namespace(t)
	obj := newConsumer(ns, "u")
	if err := me.c.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady, "")
	me.writeStatus(t, obj)
	waitSeries(t, ns, "u", MetricReady, gaugeText(MetricReady, helpReady, ns, "u", 1)) // from the first manager

	// The user may not list them, so its cache cannot sync. (Not asked of
	// the manager's cache itself: a read there before the cache starts
	// would make the manager wait for it at start, and never stop.)
	nobody := rest.CopyConfig(me.restCfg)
	nobody.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	nc, err := client.New(nobody, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.List(context.Background(), &kafkav1alpha1.IdempotentConsumerList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing as nobody: %v, want Forbidden", err)
	}
	_, stop := me.startManager(t, "nobody")
	time.Sleep(500 * time.Millisecond) // its runnables start (and wait) meanwhile
	for range 3 {
		start := time.Now()
		got := conditionSeries(t, ns, "u")
		if d := time.Since(start); d > time.Second {
			t.Errorf("a scrape with an unsynced cache took %s", d)
		}
		if len(got) != 3 { // Ready: True, False, Unknown, once (no duplicates)
			t.Errorf("status_condition series of u: %v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	stop()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopping a manager whose cache never synced took %s", d)
	}
}

// conditionsOfAReadyObject are the conditions a Ready object with a
// consumer and its topic checks has (no autoscaling): 9 types.
var conditionsOfAReadyObject = []string{
	kafkav1alpha1.ConditionReady, kafkav1alpha1.ConditionDatabaseReady, kafkav1alpha1.ConditionPartitionsReady,
	kafkav1alpha1.ConditionConsumerReady, kafkav1alpha1.ConditionTopicRetentionCovered,
	kafkav1alpha1.ConditionReplicasWithinPartitions, kafkav1alpha1.ConditionDatabaseDurable,
	kafkav1alpha1.ConditionDatabaseRoles, "TemplateUpgradePending",
}

// testThousandObjectsMetrics puts 1,000 Ready objects in the cache and
// compares what the per-object series cost: the GaugeVecs the reconciler
// used to fill (kept in the heap between scrapes) against the collector
// (nothing kept; allocations only during a scrape).
func testThousandObjectsMetrics(t *testing.T, me *metricsEnv) {
	const n = 1000
	ctx := context.Background()
	ns := me.namespace(t)
	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				obj := newConsumer(ns, fmt.Sprintf("c-%04d", i))
				if err := me.c.Create(ctx, obj); err != nil {
					errs <- err
					return
				}
				for _, typ := range conditionsOfAReadyObject {
					obj.SetCondition(typ, metav1.ConditionTrue, "Because", "a message of about the length the operator writes, naming a table and a window")
				}
				obj.Status.ObservedGeneration = obj.Generation
				obj.Status.Partitions = &kafkav1alpha1.PartitionsStatus{Count: 9, Ahead: 7, Oldest: "processed_event_p20260101", Newest: "processed_event_p20260109"}
				if err := me.c.Status().Update(ctx, obj); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d objects created in %s", n, time.Since(start).Round(time.Millisecond))

	// The collector's series, from the cache, once every object is there.
	countSeries := func(g prometheus.Gatherer) map[string]int {
		families, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "namespace" && l.GetValue() == ns {
						out[f.GetName()]++
					}
				}
			}
		}
		return out
	}
	want := map[string]int{
		MetricReady: n, MetricPartitions: n, MetricPartitionsAhead: n,
		MetricStatusCondition: n * len(conditionsOfAReadyObject) * len(conditionStatuses),
	}
	eventually(t, 30*time.Second, "the series of every object", func() (bool, string) {
		got := countSeries(metrics.Registry)
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
	})

	// The old way, in a registry of its own: GaugeVecs set from the same
	// statuses, as setPartitionGauges and setStatusGauges did.
	var list kafkav1alpha1.IdempotentConsumerList
	if err := me.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	base := heap()
	old := prometheus.NewRegistry()
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		old.MustRegister(g)
		return g
	}
	partitions := gauge(MetricPartitions, helpPartitions, "namespace", "name")
	ahead := gauge(MetricPartitionsAhead, helpPartitionsAhead, "namespace", "name")
	ready := gauge(MetricReady, helpReady, "namespace", "name")
	conditions := gauge(MetricStatusCondition, helpStatusCondition, "namespace", "name", "type", "status")
	for i := range list.Items {
		o := &list.Items[i]
		partitions.WithLabelValues(o.Namespace, o.Name).Set(float64(o.Status.Partitions.Count))
		ahead.WithLabelValues(o.Namespace, o.Name).Set(float64(o.Status.Partitions.Ahead))
		ready.WithLabelValues(o.Namespace, o.Name).Set(readyValue(o, o.GetCondition(kafkav1alpha1.ConditionReady)))
		for _, c := range o.Status.Conditions {
			for _, st := range conditionStatuses {
				conditions.WithLabelValues(o.Namespace, o.Name, c.Type, string(st)).Set(0)
			}
		}
	}
	oldRetained := heap() - base
	if got := countSeries(old); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the GaugeVecs hold %v, want %v", got, want)
	}
	oldScrape := allocated(func() { _, _ = old.Gather() })
	runtime.KeepAlive(old)
	old = nil
	partitions, ahead, ready, conditions = nil, nil, nil, nil

	// The collector: nothing to keep; a scrape lists the cache and builds
	// the series.
	collector := prometheus.NewRegistry()
	collector.MustRegister(objectMetrics)
	base = heap()
	newScrape := allocated(func() {
		if _, err := collector.Gather(); err != nil {
			t.Error(err)
		}
	})
	newRetained := int64(heap()) - int64(base)
	mib := func(b float64) string { return fmt.Sprintf("%.2f", b/(1<<20)) }
	line := fmt.Sprintf("RESULT metrics_heap objects=%d series=%d gaugevec_retained_mib=%s collector_retained_mib=%s gaugevec_scrape_alloc_mib=%s collector_scrape_alloc_mib=%s",
		n, want[MetricReady]+want[MetricPartitions]+want[MetricPartitionsAhead]+want[MetricStatusCondition],
		mib(float64(oldRetained)), mib(float64(newRetained)), mib(float64(oldScrape)), mib(float64(newScrape)))
	fmt.Println(line)
	// Nothing per object survives a scrape (1 KiB per object leaves room for
	// the GC's noise and the test's own objects).
	if newRetained > n<<10 {
		t.Errorf("the heap grew by %d bytes over a scrape of %d objects", newRetained, n)
	}

	// Deleting them all removes every series.
	if err := me.c.DeleteAllOf(ctx, &kafkav1alpha1.IdempotentConsumer{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "no series left", func() (bool, string) {
		got := countSeries(metrics.Registry)
		return len(got) == 0, fmt.Sprint(got)
	})
}
