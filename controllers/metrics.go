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
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
)

func init() {
	metrics.Registry.MustRegister(maintenanceRuns, maintenanceDuration, partitionsCreated, partitionsDropped,
		problems, partitionsGauge, partitionsAhead, readyGauge)
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

func forgetObjectMetrics(key types.NamespacedName) {
	for _, g := range []*prometheus.GaugeVec{partitionsGauge, partitionsAhead, readyGauge} {
		g.DeleteLabelValues(key.Namespace, key.Name)
	}
}
