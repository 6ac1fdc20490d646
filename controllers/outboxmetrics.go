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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// The Outboxes' per-object metrics, derived at scrape time from their
// status in the manager's cache (as objectCollector does for the
// IdempotentConsumers): the backlog and the oldest unpublished event's age
// as the operator last read them (status.statsTime, every 30s by default;
// the relay's own idempotent_consumer_outbox_* metrics are live), Ready, and
// the conditions. Families of their own: an Outbox and an
// IdempotentConsumer may share a name.
const (
	MetricOutboxBacklog          = "idempotency_operator_outbox_backlog"
	MetricOutboxOldestAge        = "idempotency_operator_outbox_oldest_unpublished_age_seconds"
	MetricOutboxReady            = "idempotency_operator_outbox_ready"
	MetricOutboxStatusCondition  = "idempotency_operator_outbox_status_condition"
	MetricOutboxRelayReplicas    = "idempotency_operator_outbox_relay_ready_replicas"
	helpOutboxStatusConditionFmt = "An Outbox's status conditions (kube-state-metrics style): 1 for the condition's current status, 0 for the other two."
)

var (
	descOutboxBacklog = prometheus.NewDesc(MetricOutboxBacklog,
		"Committed rows of an Outbox not yet published, as the operator last read them (status.backlog).", []string{"namespace", "name"}, nil)
	descOutboxOldestAge = prometheus.NewDesc(MetricOutboxOldestAge,
		"Age of an Outbox's oldest unpublished row (now minus status.oldestUnpublishedTime); 0 when the backlog is empty.", []string{"namespace", "name"}, nil)
	descOutboxReady = prometheus.NewDesc(MetricOutboxReady,
		"1 if the Outbox's Ready condition is True, else 0.", []string{"namespace", "name"}, nil)
	descOutboxStatusCondition = prometheus.NewDesc(MetricOutboxStatusCondition,
		helpOutboxStatusConditionFmt, []string{"namespace", "name", "type", "status"}, nil)
	descOutboxRelayReplicas = prometheus.NewDesc(MetricOutboxRelayReplicas,
		"Ready replicas of an Outbox's relay Deployment (one owns the stream, the others stand by).", []string{"namespace", "name"}, nil)

	outboxMetrics = &outboxCollector{}
)

func init() { metrics.Registry.MustRegister(outboxMetrics) }

// outboxCollector lists the Outboxes of each running manager's cache.
type outboxCollector struct {
	mu      sync.Mutex
	sources []client.Reader
}

// exportOutboxMetrics adds the manager's cache as a source while it runs.
func exportOutboxMetrics(mgr manager.Manager) {
	reader := mgr.GetCache()
	outboxMetrics.mu.Lock()
	outboxMetrics.sources = append(outboxMetrics.sources, reader)
	outboxMetrics.mu.Unlock()
	_ = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		outboxMetrics.mu.Lock()
		defer outboxMetrics.mu.Unlock()
		for i, s := range outboxMetrics.sources {
			if s == reader {
				outboxMetrics.sources = append(outboxMetrics.sources[:i], outboxMetrics.sources[i+1:]...)
				break
			}
		}
		return nil
	}))
}

// Describe implements prometheus.Collector.
func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descOutboxBacklog
	ch <- descOutboxOldestAge
	ch <- descOutboxReady
	ch <- descOutboxStatusCondition
	ch <- descOutboxRelayReplicas
}

// Collect implements prometheus.Collector.
func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := append([]client.Reader(nil), c.sources...)
	c.mu.Unlock()
	seen := map[types.NamespacedName]bool{}
	now := time.Now()
	for _, src := range sources {
		ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
		var list kafkav1alpha1.OutboxList
		err := src.List(ctx, &list, client.UnsafeDisableDeepCopy)
		cancel()
		if err != nil {
			continue // not synced yet, or the kind is not installed
		}
		for i := range list.Items {
			o := &list.Items[i]
			key := types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
			if seen[key] {
				continue
			}
			seen[key] = true
			collectOutbox(ch, o, now)
		}
	}
}

func collectOutbox(ch chan<- prometheus.Metric, o *kafkav1alpha1.Outbox, now time.Time) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{o.Namespace, o.Name}, labels...)...)
	}
	st := o.Status
	if st.Backlog != nil {
		gauge(descOutboxBacklog, float64(*st.Backlog))
		age := 0.0
		if t := st.OldestUnpublishedTime; t != nil {
			age = max(now.Sub(t.Time).Seconds(), 0)
		}
		gauge(descOutboxOldestAge, age)
	}
	if st.DeploymentName != "" {
		gauge(descOutboxRelayReplicas, float64(st.ReadyReplicas))
	}
	if ready := o.GetCondition(kafkav1alpha1.ConditionReady); ready != nil {
		v := 0.0
		if ready.Status == "True" && ready.ObservedGeneration == o.Generation {
			v = 1
		}
		gauge(descOutboxReady, v)
	}
	for _, c := range st.Conditions {
		for _, s := range conditionStatuses {
			v := 0.0
			if c.Status == s {
				v = 1
			}
			gauge(descOutboxStatusCondition, v, c.Type, string(s))
		}
	}
}
