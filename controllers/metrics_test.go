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
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
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

func TestConditionGauges(t *testing.T) {
	ns := "metrics-" + randSuffix()
	obj := newConsumer(ns, "a")
	set := func(typ string, st metav1.ConditionStatus) {
		obj.SetCondition(typ, st, "Because", "test")
	}
	compare := func(name string, want map[string]metav1.ConditionStatus) {
		t.Helper()
		expected := ""
		if len(want) > 0 {
			expected = expectConditions(ns, name, want)
		}
		if err := testutil.GatherAndCompare(objectSeries(ns, name), strings.NewReader(expected), MetricStatusCondition); err != nil {
			t.Error(err)
		}
	}

	// Not ready yet, reconciling, the brokers not reachable.
	set(kafkav1alpha1.ConditionReady, metav1.ConditionFalse)
	set(kafkav1alpha1.ConditionReconciling, metav1.ConditionTrue)
	set(kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionTrue)
	set(kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown)
	setStatusGauges(obj)
	compare("a", map[string]metav1.ConditionStatus{
		kafkav1alpha1.ConditionReady:                 metav1.ConditionFalse,
		kafkav1alpha1.ConditionReconciling:           metav1.ConditionTrue,
		kafkav1alpha1.ConditionDatabaseReady:         metav1.ConditionTrue,
		kafkav1alpha1.ConditionTopicRetentionCovered: metav1.ConditionUnknown,
	})
	if v := testutil.ToFloat64(readyGauge.WithLabelValues(ns, "a")); v != 0 {
		t.Errorf("%s = %v, want 0", MetricReady, v)
	}

	// Ready; Reconciling is gone (kstatus: present only while True), so are
	// its series; the retention warning is now known and False.
	set(kafkav1alpha1.ConditionReady, metav1.ConditionTrue)
	meta.RemoveStatusCondition(&obj.Status.Conditions, kafkav1alpha1.ConditionReconciling)
	set(kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionFalse)
	setStatusGauges(obj)
	compare("a", map[string]metav1.ConditionStatus{
		kafkav1alpha1.ConditionReady:                 metav1.ConditionTrue,
		kafkav1alpha1.ConditionDatabaseReady:         metav1.ConditionTrue,
		kafkav1alpha1.ConditionTopicRetentionCovered: metav1.ConditionFalse,
	})
	if v := testutil.ToFloat64(readyGauge.WithLabelValues(ns, "a")); v != 1 {
		t.Errorf("%s = %v, want 1", MetricReady, v)
	}

	// Another object; forgetting the first removes only the first's series.
	other := newConsumer(ns, "b")
	other.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionTrue, "Ready", "")
	setStatusGauges(other)
	forgetObjectMetrics(types.NamespacedName{Namespace: ns, Name: "a"})
	compare("a", nil)
	if got := conditionSeries(t, ns, "a"); len(got) != 0 {
		t.Errorf("series of a forgotten object: %v", got)
	}
	compare("b", map[string]metav1.ConditionStatus{kafkav1alpha1.ConditionReady: metav1.ConditionTrue})

	// A forgotten object that comes back starts from its conditions alone.
	obj.Status.Conditions = nil
	set(kafkav1alpha1.ConditionReady, metav1.ConditionUnknown)
	setStatusGauges(obj)
	compare("a", map[string]metav1.ConditionStatus{kafkav1alpha1.ConditionReady: metav1.ConditionUnknown})
	forgetObjectMetrics(types.NamespacedName{Namespace: ns, Name: "a"})
	forgetObjectMetrics(types.NamespacedName{Namespace: ns, Name: "b"})
	if got := conditionSeries(t, ns, "b"); len(got) != 0 {
		t.Errorf("series of a forgotten object: %v", got)
	}
}
