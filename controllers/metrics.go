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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	partitionsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricPartitions,
		Help: "Partitions attached to an IdempotentConsumer's table.",
	}, []string{"namespace", "name"})
	partitionsAhead = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricPartitionsAhead,
		Help: "Partitions of an IdempotentConsumer's table that lie wholly in the future: the margin if maintenance stopped now.",
	}, []string{"namespace", "name"})
	readyGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricReady,
		Help: "1 if the IdempotentConsumer's Ready condition is True, else 0.",
	}, []string{"namespace", "name"})
	statusCondition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricStatusCondition,
		Help: helpStatusCondition,
	}, []string{"namespace", "name", "type", "status"})
)

const helpStatusCondition = "An IdempotentConsumer's status conditions (kube-state-metrics style): 1 for the condition's " +
	"current status (True, False or Unknown), 0 for the other two. A condition the object does not have has no series " +
	"(Reconciling and Stalled are present only while True, AutoscalingReady only with spec.autoscaling)."

// conditionStatuses are the values of a condition's status, one series each.
var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

// conditionTypes remembers which condition types have series per object, so
// a condition that goes away loses its series without the others being
// deleted and set again (which a scrape in between would see as a gap).
var conditionTypes = struct {
	sync.Mutex
	m map[types.NamespacedName]map[string]bool
}{m: map[types.NamespacedName]map[string]bool{}}

func init() {
	metrics.Registry.MustRegister(maintenanceRuns, maintenanceDuration, partitionsCreated, partitionsDropped,
		problems, partitionsGauge, partitionsAhead, readyGauge, statusCondition)
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

func setPartitionGauges(obj *kafkav1alpha1.IdempotentConsumer, ps *kafkav1alpha1.PartitionsStatus) {
	partitionsGauge.WithLabelValues(obj.Namespace, obj.Name).Set(float64(ps.Count))
	partitionsAhead.WithLabelValues(obj.Namespace, obj.Name).Set(float64(ps.Ahead))
}

func setReadyGauge(obj *kafkav1alpha1.IdempotentConsumer) {
	v := 0.0
	if obj.IsReady() {
		v = 1
	}
	readyGauge.WithLabelValues(obj.Namespace, obj.Name).Set(v)
}

// setConditionGauges exports the object's conditions as they are now: for
// each condition present, 1 on its status and 0 on the other two; the series
// of conditions it no longer has are deleted.
func setConditionGauges(obj *kafkav1alpha1.IdempotentConsumer) {
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	conditionTypes.Lock()
	defer conditionTypes.Unlock()
	present := make(map[string]bool, len(obj.Status.Conditions))
	for _, c := range obj.Status.Conditions {
		present[c.Type] = true
		for _, st := range conditionStatuses {
			v := 0.0
			if c.Status == st {
				v = 1
			}
			statusCondition.WithLabelValues(obj.Namespace, obj.Name, c.Type, string(st)).Set(v)
		}
	}
	for t := range conditionTypes.m[key] {
		if !present[t] {
			statusCondition.DeletePartialMatch(prometheus.Labels{"namespace": obj.Namespace, "name": obj.Name, "type": t})
		}
	}
	conditionTypes.m[key] = present
}

// setStatusGauges exports what the object's status says: Ready and every
// condition.
func setStatusGauges(obj *kafkav1alpha1.IdempotentConsumer) {
	setReadyGauge(obj)
	setConditionGauges(obj)
}

func forgetObjectMetrics(key types.NamespacedName) {
	for _, g := range []*prometheus.GaugeVec{partitionsGauge, partitionsAhead, readyGauge} {
		g.DeleteLabelValues(key.Namespace, key.Name)
	}
	conditionTypes.Lock()
	defer conditionTypes.Unlock()
	statusCondition.DeletePartialMatch(prometheus.Labels{"namespace": key.Namespace, "name": key.Name})
	delete(conditionTypes.m, key)
}
