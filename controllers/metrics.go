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

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// Metric names the operator exports on the manager's metrics endpoint (next
// to controller-runtime's own controller_runtime_* and workqueue_* metrics).
// Dashboards and alerts refer to these constants' values.
const (
	MetricMaintenanceRuns     = "idempotency_operator_maintenance_runs_total"
	MetricMaintenanceDuration = "idempotency_operator_maintenance_duration_seconds"
	MetricPartitionsCreated   = "idempotency_operator_partitions_created_total"
	MetricPartitionsDropped   = "idempotency_operator_partitions_dropped_total"
	MetricProblems            = "idempotency_operator_problems_total"
	MetricPartitions          = "idempotency_operator_partitions"
	MetricPartitionsAhead     = "idempotency_operator_partitions_ahead"
	MetricReady               = "idempotency_operator_ready"
	MetricStatusCondition     = "idempotency_operator_status_condition"
)

var (
	maintenanceRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricMaintenanceRuns,
		Help: "Partition maintenance runs, by result (success or failure).",
	}, []string{"result"})
	maintenanceDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    MetricMaintenanceDuration,
		Help:    "Duration of one partition maintenance run.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	})
	partitionsCreated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricPartitionsCreated,
		Help: "Partitions created (or adopted) and attached.",
	})
	partitionsDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricPartitionsDropped,
		Help: "Expired partitions detached and dropped.",
	})
	problems = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricProblems,
		Help: "Reconciles that found an object not ready, by condition reason (SecretNotFound, DatabaseUnreachable, TableNotOwned, ...).",
	}, []string{"reason"})

	// The per-object families: computed at scrape time from the objects'
	// status in the manager's cache (objectCollector), so the operator keeps
	// no series per object in memory. They are declared as vectors, like the
	// metrics above (config/monitoring's tests read these declarations for
	// each metric's kind and labels), but only their descriptors are used.
	descPartitions = gaugeDesc(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricPartitions,
		Help: "Partitions attached to an IdempotentConsumer's table.",
	}, []string{"namespace", "name"}))
	descPartitionsAhead = gaugeDesc(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricPartitionsAhead,
		Help: "Partitions of an IdempotentConsumer's table that lie wholly in the future: the margin if maintenance stopped now.",
	}, []string{"namespace", "name"}))
	descReady = gaugeDesc(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricReady,
		Help: "1 if the IdempotentConsumer's Ready condition is True, else 0.",
	}, []string{"namespace", "name"}))
	descStatusCondition = gaugeDesc(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricStatusCondition,
		Help: helpStatusCondition,
	}, []string{"namespace", "name", "type", "status"}))

	// objectMetrics is registered once, here; each running manager adds its
	// cache to it (exportObjectMetrics).
	objectMetrics = &objectCollector{}
)

const helpStatusCondition = "An IdempotentConsumer's status conditions (kube-state-metrics style): 1 for the condition's " +
	"current status (True, False or Unknown), 0 for the other two. A condition the object does not have has no series " +
	"(Reconciling and Stalled are present only while True, AutoscalingReady only with spec.autoscaling)."

// gaugeDesc returns the descriptor of a vector that is never set.
func gaugeDesc(v *prometheus.GaugeVec) *prometheus.Desc {
	ch := make(chan *prometheus.Desc, 1)
	v.Describe(ch)
	return <-ch
}

// conditionStatuses are the values of a condition's status, one series each.
var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

func init() {
	metrics.Registry.MustRegister(maintenanceRuns, maintenanceDuration, partitionsCreated, partitionsDropped,
		problems, objectMetrics)
}

func observeMaintenance(d time.Duration, err error, created, dropped int) {
	maintenanceDuration.Observe(d.Seconds())
	if err != nil {
		maintenanceRuns.WithLabelValues("failure").Inc()
	} else {
		maintenanceRuns.WithLabelValues("success").Inc()
	}
	partitionsCreated.Add(float64(created))
	partitionsDropped.Add(float64(dropped))
}

func observeProblem(reason string) { problems.WithLabelValues(reason).Inc() }

// objectCollector exports the per-object families (partitions,
// partitions_ahead, ready, status_condition) the way kube-state-metrics
// does: on each scrape it lists the IdempotentConsumers from the caches of
// the running managers and derives every series from the object's stored
// status. Nothing is kept between scrapes, so an object that is deleted, or
// a condition that goes away, has no series on the next scrape.
//
// It is registered once, in init, because a Prometheus registry takes a
// descriptor only once: a collector per manager would fail to register
// while an earlier manager's is still there (the test suites start many
// managers in one process). The managers come and go as sources instead.
type objectCollector struct {
	mu      sync.Mutex
	sources []*objectSource
}

// objectSource is one running manager's cache, with its IdempotentConsumer
// informer synced.
type objectSource struct {
	reader   client.Reader
	informer cache.Informer
	log      logr.Logger
}

// collectTimeout bounds one source's listing; a synced informer cache
// answers from memory without waiting, so this only guards a scrape against
// a source that would.
const collectTimeout = 5 * time.Second

// Describe implements prometheus.Collector.
func (c *objectCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPartitions
	ch <- descPartitionsAhead
	ch <- descReady
	ch <- descStatusCondition
}

// Collect implements prometheus.Collector.
func (c *objectCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := append([]*objectSource(nil), c.sources...)
	c.mu.Unlock()
	// Two managers watching the same API server (only in tests) see the
	// same objects: export each once, or the scrape fails on duplicates.
	var seen map[types.NamespacedName]bool
	if len(sources) > 1 {
		seen = map[types.NamespacedName]bool{}
	}
	conditionTypes := map[string]*dto.LabelPair{} // a few types, for this scrape only
	for _, src := range sources {
		if !src.informer.HasSynced() {
			continue // nothing rather than a partial view, and no wait
		}
		ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
		var list kafkav1alpha1.IdempotentConsumerList
		// Read-only: the items are shallow copies of the cache's objects,
		// sharing their strings and slices.
		err := src.reader.List(ctx, &list, client.UnsafeDisableDeepCopy)
		cancel()
		if err != nil {
			src.log.Error(err, "Listing IdempotentConsumers for the metrics scrape")
			continue
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if seen != nil {
				key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
				if seen[key] {
					continue
				}
				seen[key] = true
			}
			collectObject(ch, obj, conditionTypes)
		}
	}
}

// collectObject sends the series of one object, as the reconcile that wrote
// its status would have set them. typeLabels holds this scrape's label
// pairs of the condition types seen so far.
func collectObject(ch chan<- prometheus.Metric, obj *kafkav1alpha1.IdempotentConsumer, typeLabels map[string]*dto.LabelPair) {
	conds := obj.Status.Conditions
	ready := obj.GetCondition(kafkav1alpha1.ConditionReady)
	ps := obj.Status.Partitions // written by every successful maintenance, never cleared
	n := 3 * len(conds)
	if ready != nil {
		n++
	}
	if ps != nil {
		n += 2
	}
	if n == 0 {
		return
	}
	// A few allocations per object, not per series: the series, the label
	// pairs they share, and the label values point into the cached object
	// (read-only).
	series := make([]gaugeSeries, 0, n)
	send := func(desc *prometheus.Desc, labels []*dto.LabelPair, value float64) {
		series = append(series, gaugeSeries{desc: desc, labels: labels, value: value})
		ch <- &series[len(series)-1]
	}
	name := &dto.LabelPair{Name: &labelName, Value: &obj.Name}
	namespace := &dto.LabelPair{Name: &labelNamespace, Value: &obj.Namespace}
	objLabels := []*dto.LabelPair{name, namespace}
	if ps != nil {
		send(descPartitions, objLabels, float64(ps.Count))
		send(descPartitionsAhead, objLabels, float64(ps.Ahead))
	}
	// Every status the operator writes has Ready; an object without it was
	// never reconciled to the end and has no series.
	if ready != nil {
		send(descReady, objLabels, readyValue(obj, ready))
	}
	condLabels := make([]*dto.LabelPair, 0, 4*len(conditionStatuses)*len(conds))
	for i := range conds {
		c := &conds[i]
		typ := typeLabels[c.Type]
		if typ == nil {
			typ = &dto.LabelPair{Name: &labelType, Value: &c.Type}
			typeLabels[c.Type] = typ
		}
		for j, st := range conditionStatuses {
			v := 0.0
			if c.Status == st {
				v = 1
			}
			start := len(condLabels)
			condLabels = append(condLabels, name, namespace, statusLabels[j], typ)
			send(descStatusCondition, condLabels[start:len(condLabels):len(condLabels)], v)
		}
	}
}

// The label names, sorted as the registry wants a metric's label pairs:
// name, namespace, status, type.
var (
	labelName, labelNamespace, labelStatus, labelType = "name", "namespace", "status", "type"
	// statusLabels are the status label pairs of conditionStatuses, shared
	// by every series (client_golang shares a vector's label pairs the same
	// way: read-only once written).
	statusLabels = func() []*dto.LabelPair {
		out := make([]*dto.LabelPair, len(conditionStatuses))
		for i, st := range conditionStatuses {
			v := string(st)
			out[i] = &dto.LabelPair{Name: &labelStatus, Value: &v}
		}
		return out
	}()
)

// gaugeSeries is one series of a per-object family: what
// prometheus.MustNewConstMetric makes, without allocating the object's
// label pairs again for each of its series. A scrape of 1,000 objects
// (30,000 series, TestObjectMetrics/ThousandObjects) allocates 11.5 MiB
// with it, 25 MiB with MustNewConstMetric.
type gaugeSeries struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair // sorted by name
	value  float64
}

// Desc implements prometheus.Metric.
func (g *gaugeSeries) Desc() *prometheus.Desc { return g.desc }

// Write implements prometheus.Metric.
func (g *gaugeSeries) Write(out *dto.Metric) error {
	out.Label = g.labels
	out.Gauge = &dto.Gauge{Value: &g.value}
	return nil
}

// readyValue is IsReady as of the generation the status was written for:
// the reconcile that wrote it set Ready and status.observedGeneration to the
// object's generation then. A spec change (or a deletion, which bumps the
// generation of an object with a finalizer) not yet reconciled leaves the
// value as that reconcile set it, not 0.
func readyValue(obj *kafkav1alpha1.IdempotentConsumer, ready *metav1.Condition) float64 {
	if ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == obj.Status.ObservedGeneration {
		return 1
	}
	return 0
}

func (c *objectCollector) add(src *objectSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, src)
}

func (c *objectCollector) remove(src *objectSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.sources {
		if s == src {
			c.sources = append(c.sources[:i], c.sources[i+1:]...)
			return
		}
	}
}

// exportObjectMetrics adds to mgr a runnable that makes its cache a source
// of the per-object series while it runs. It runs only on the leader (as
// the reconciler does, so a standby replica exports no per-object series,
// as before), and only once the IdempotentConsumer informer has synced: a
// scrape before then has no per-object series and never waits.
func exportObjectMetrics(mgr manager.Manager) error {
	c := mgr.GetCache()
	logger := mgr.GetLogger().WithName("metrics")
	run := func(ctx context.Context) error {
		informer, err := c.GetInformer(ctx, &kafkav1alpha1.IdempotentConsumer{}) // blocks until synced
		if err != nil {
			if ctx.Err() == nil {
				// The controller, which needs the same informer, fails the
				// manager with the reason; the metrics need not do it first.
				logger.Error(err, "No per-object metrics: the IdempotentConsumer informer did not start")
			}
			return nil
		}
		src := &objectSource{reader: c, informer: informer, log: logger}
		objectMetrics.add(src)
		defer objectMetrics.remove(src)
		<-ctx.Done()
		return nil
	}
	if err := mgr.Add(manager.RunnableFunc(run)); err != nil {
		return fmt.Errorf("adding the per-object metrics: %w", err)
	}
	return nil
}
