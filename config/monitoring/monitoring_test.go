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

// Package monitoring_test checks the observability assets in config/monitoring
// against the code: every metric an alert or a dashboard panel queries must be
// one that the consumer runtime or the operator registers (with the labels its
// matchers use), every alert links to a runbook section that exists, and the
// kustomization renders the objects the Prometheus Operator and Grafana expect,
// selecting the pods the operator really builds.
package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/idempotency-dev/operator/controllers"
	"github.com/idempotency-dev/operator/controllers/objects"
)

const runbookBase = "https://github.com/idempotency-dev/operator/blob/main/docs/runbooks.md#"

// Labels a series gets from the scrape rather than from the code: the
// Prometheus Operator's target labels, and `name`, which the PodMonitors here
// copy from the consumer and outbox relay pods' app.kubernetes.io/instance
// label.
var scrapeLabels = []string{"namespace", "pod", "container", "endpoint", "job", "instance", "service", "name"}

// kind of a registered metric; "" when the registry cannot tell (a vector
// registered by the operator has no samples until its labels are used).
type metricInfo struct {
	Kind   string   // counter, gauge, histogram, summary, untyped, or ""
	Labels []string // variable labels; nil when unknown
}

// known is the set of metrics the code registers.
type known struct {
	consumer map[string]metricInfo
	// operator reports whether the manager's registry holds a metric.
	operator func(name string) (metricInfo, bool)
}

// recorder is a prometheus.Registerer that keeps what is registered with it,
// so that metric vectors can be described before any label is used.
type recorder struct{ cs []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error { r.cs = append(r.cs, c); return nil }
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.cs = append(r.cs, cs...)
}
func (r *recorder) Unregister(prometheus.Collector) bool { return false }

var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]+)".*variableLabels: \{([^}]*)\}\}$`)

// describe returns the metrics a collector would export, with their labels.
func describe(t *testing.T, c prometheus.Collector) map[string]metricInfo {
	t.Helper()
	kind := ""
	switch m := c.(type) {
	case *prometheus.CounterVec:
		kind = "counter"
	case *prometheus.GaugeVec:
		kind = "gauge"
	case *prometheus.HistogramVec:
		kind = "histogram"
	case *prometheus.SummaryVec:
		kind = "summary"
	case prometheus.Metric:
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatalf("writing %T: %v", c, err)
		}
		switch {
		case d.Counter != nil:
			kind = "counter"
		case d.Gauge != nil:
			kind = "gauge"
		case d.Histogram != nil:
			kind = "histogram"
		case d.Summary != nil:
			kind = "summary"
		default:
			kind = "untyped"
		}
	default:
		t.Fatalf("collector of unexpected type %T: teach describe about it", c)
	}
	out := map[string]metricInfo{}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot parse %s", d)
		}
		labels := []string{} // known to have none, unlike nil
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		out[m[1]] = metricInfo{Kind: kind, Labels: labels}
	}
	return out
}

// consumerMetrics builds a consumer (nothing connects before Run) on a
// recording registerer and describes everything it registered.
func consumerMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	rec := &recorder{}
	_, err := consumer.New(consumer.Config{
		Brokers:     []string{"127.0.0.1:9"},
		Topic:       "t",
		Group:       "g",
		DatabaseURL: "postgres://metrics@127.0.0.1:1/metrics",
		Registerer:  rec,
		Gatherer:    prometheus.NewRegistry(),
	}, func(context.Context, pgx.Tx, *consumer.Event) error { return nil })
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	out := map[string]metricInfo{}
	for _, c := range rec.cs {
		maps.Copy(out, describe(t, c))
	}
	if len(out) == 0 {
		t.Fatal("the consumer registered no metrics")
	}
	for name := range out {
		if !strings.HasPrefix(name, consumer.MetricsNamespace+"_") {
			t.Errorf("consumer metric %s lacks the %s_ prefix", name, consumer.MetricsNamespace)
		}
	}
	return out
}

// operatorMetrics answers from controller-runtime's registry, where the
// controllers package (imported by this test) registers its metrics in init,
// next to controller-runtime's own. The registry has no public Describe, and
// its vectors export nothing before their labels are used, so a name is looked
// up by registering a probe under it: the registry refuses a second collector
// with a registered name. Kinds and labels of the operator's own metrics come
// from the constructor calls in controllers/*.go; controller-runtime's stay
// unknown.
func operatorMetrics(t *testing.T) func(string) (metricInfo, bool) {
	t.Helper()
	declared := operatorDeclared(t)
	return func(name string) (metricInfo, bool) {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe from config/monitoring tests"})
		if err := ctrlmetrics.Registry.Register(probe); err == nil {
			ctrlmetrics.Registry.Unregister(probe)
			return metricInfo{}, false
		}
		return declared[name], true
	}
}

// operatorDeclared reads controllers/*.go for calls such as
// prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricReady, ...},
// []string{"namespace", "name"}) and returns each metric's kind and labels.
func operatorDeclared(t *testing.T) map[string]metricInfo {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("../../controllers/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no controllers/*.go: %v", err)
	}
	consts := map[string]string{}
	var calls []*ast.CallExpr
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[id.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			case *ast.CallExpr:
				calls = append(calls, n)
			}
			return true
		})
	}
	str := func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			v, err := strconv.Unquote(e.Value)
			return v, err == nil
		case *ast.Ident:
			v, ok := consts[e.Name]
			return v, ok
		}
		return "", false
	}
	ctor := regexp.MustCompile(`^New(Counter|Gauge|Histogram|Summary)(Vec)?$`)
	out := map[string]metricInfo{}
	for _, c := range calls {
		sel, ok := c.Fun.(*ast.SelectorExpr)
		if !ok || len(c.Args) == 0 {
			continue
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
			continue
		}
		m := ctor.FindStringSubmatch(sel.Sel.Name)
		opts, ok := c.Args[0].(*ast.CompositeLit)
		if m == nil || !ok {
			continue
		}
		var name string
		for _, el := range opts.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
					name, _ = str(kv.Value)
				}
				if k, ok := kv.Key.(*ast.Ident); ok && (k.Name == "Namespace" || k.Name == "Subsystem") {
					t.Fatalf("%s: teach operatorDeclared about Namespace/Subsystem", fset.Position(c.Pos()))
				}
			}
		}
		if name == "" {
			t.Fatalf("%s: cannot resolve the metric's Name", fset.Position(c.Pos()))
		}
		labels := []string{}
		if m[2] == "Vec" {
			lst, ok := c.Args[len(c.Args)-1].(*ast.CompositeLit)
			if !ok {
				t.Fatalf("%s: cannot read the label names of %s", fset.Position(c.Pos()), name)
			}
			for _, e := range lst.Elts {
				l, ok := str(e)
				if !ok {
					t.Fatalf("%s: cannot read the label names of %s", fset.Position(c.Pos()), name)
				}
				labels = append(labels, l)
			}
		}
		out[name] = metricInfo{Kind: strings.ToLower(m[1]), Labels: labels}
	}
	if len(out) == 0 {
		t.Fatal("found no prometheus.New* calls in controllers/*.go")
	}
	return out
}

func registered(t *testing.T) known {
	k := known{consumer: consumerMetrics(t), operator: operatorMetrics(t)}
	for name, info := range outboxMetrics(t) {
		k.consumer[name] = info
	}
	return k
}

// outboxMetrics describes the metrics of the outbox relay (`consumer
// outbox-relay`), which share the consumer's prefix and are scraped from the
// relay pods by the PodMonitor outbox-relays.
func outboxMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	rec := &recorder{}
	if _, err := outbox.NewMetrics(rec); err != nil {
		t.Fatalf("outbox.NewMetrics: %v", err)
	}
	out := map[string]metricInfo{}
	for _, c := range rec.cs {
		maps.Copy(out, describe(t, c))
	}
	if len(out) == 0 {
		t.Fatal("the outbox relay registered no metrics")
	}
	for name := range out {
		if !strings.HasPrefix(name, consumer.MetricsNamespace+"_outbox_") {
			t.Errorf("outbox relay metric %s lacks the %s_outbox_ prefix", name, consumer.MetricsNamespace)
		}
	}
	return out
}

// lookup resolves a series name to its metric, stripping the suffixes a
// histogram (_bucket, _sum, _count) or a summary (_sum, _count) exports.
func (k known) lookup(series string) (base string, info metricInfo, ok bool) {
	if info, ok := k.consumer[series]; ok {
		return series, info, true
	}
	if info, ok := k.operator(series); ok {
		return series, info, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		b, found := strings.CutSuffix(series, suffix)
		if !found {
			continue
		}
		info, ok := k.consumer[b]
		if !ok {
			info, ok = k.operator(b)
		}
		if !ok {
			return "", metricInfo{}, false
		}
		switch {
		case info.Kind == "histogram", info.Kind == "summary" && suffix != "_bucket":
		case info.Kind == "" && !strings.HasSuffix(b, "_total"):
			// controller-runtime's metrics are of unknown kind: accept,
			// unless the name says counter.
		default:
			return "", metricInfo{}, false
		}
		if suffix == "_bucket" && info.Labels != nil {
			info.Labels = append(slices.Clone(info.Labels), "le")
		}
		return b, info, true
	}
	return "", metricInfo{}, false
}

// check returns a problem for every selector of expr that names a metric the
// code does not register, or matches on a label the metric does not have.
func (k known) check(where, expr string) []string {
	sels, err := selectors(expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", where, err)}
	}
	if len(sels) == 0 {
		return []string{fmt.Sprintf("%s: no metric in %q", where, expr)}
	}
	var problems []string
	for _, s := range sels {
		_, info, ok := k.lookup(s.Metric)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: metric %s is not registered by the consumer or the operator", where, s.Metric))
			continue
		}
		if info.Labels == nil {
			continue
		}
		for _, l := range s.Labels {
			if !slices.Contains(info.Labels, l) && !slices.Contains(scrapeLabels, l) {
				problems = append(problems, fmt.Sprintf("%s: metric %s has no label %q (it has %v, plus the scrape's %v)", where, s.Metric, l, info.Labels, scrapeLabels))
			}
		}
	}
	return problems
}

// Rule mirrors the PrometheusRule fields used here; decoding is strict, so a
// misspelled field fails the test.
type promRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Rules    []struct {
				Alert         string            `json:"alert,omitempty"`
				Record        string            `json:"record,omitempty"`
				Expr          string            `json:"expr"`
				For           string            `json:"for,omitempty"`
				KeepFiringFor string            `json:"keep_firing_for,omitempty"`
				Labels        map[string]string `json:"labels,omitempty"`
				Annotations   map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func loadRule(t *testing.T) promRule {
	t.Helper()
	b, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r promRule
	if err := yaml.UnmarshalStrict(b, &r); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if r.APIVersion != "monitoring.coreos.com/v1" || r.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is a %s %s", r.APIVersion, r.Kind)
	}
	return r
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource map[string]string `json:"datasource"`
	Targets    []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) (dashboard, []byte) {
	t.Helper()
	b, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	return d, b
}

// queries returns every PromQL query of the rule and the dashboard, keyed by
// where it is.
func queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range loadRule(t).Spec.Groups {
		for _, r := range g.Rules {
			out["rule "+g.Name+"/"+r.Alert+r.Record] = r.Expr
		}
	}
	d, _ := loadDashboard(t)
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("variable %s: query is neither an object nor a string", v.Name)
			}
			q.Query = s
		}
		expr, err := grafanaQuery(q.Query)
		if err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		if expr != "" {
			out["variable "+v.Name] = expr
		}
	}
	return out
}

// TestQueriesUseRegisteredMetrics is the acceptance check: alerts and
// dashboard reference only metrics (and labels) the code registers.
func TestQueriesUseRegisteredMetrics(t *testing.T) {
	k := registered(t)
	qs := queries(t)
	if len(qs) < 20 {
		t.Fatalf("found only %d queries; is the walk of the files broken?", len(qs))
	}
	used := map[string]bool{}
	for _, where := range slices.Sorted(maps.Keys(qs)) {
		for _, p := range k.check(where, qs[where]) {
			t.Error(p)
		}
		sels, _ := selectors(qs[where])
		for _, s := range sels {
			if b, _, ok := k.lookup(s.Metric); ok {
				used[b] = true
			}
		}
	}
	// Every consumer metric is on the dashboard or in an alert.
	for name := range k.consumer {
		if !used[name] {
			t.Errorf("consumer metric %s is neither on the dashboard nor in an alert", name)
		}
	}
	for _, name := range []string{
		controllers.MetricMaintenanceRuns, controllers.MetricMaintenanceDuration, controllers.MetricPartitionsCreated,
		controllers.MetricPartitionsDropped, controllers.MetricProblems, controllers.MetricPartitions,
		controllers.MetricPartitionsAhead, controllers.MetricReady,
	} {
		if !used[name] {
			t.Errorf("operator metric %s is neither on the dashboard nor in an alert", name)
		}
	}
}

// TestCheckCatchesMistakes shows that the check fails for the mistakes it is
// there to catch, and that the operator lookup really consults the registry.
func TestCheckCatchesMistakes(t *testing.T) {
	k := registered(t)
	if _, ok := k.operator(controllers.MetricReady); !ok {
		t.Fatalf("%s not found in controller-runtime's registry", controllers.MetricReady)
	}
	if _, ok := k.operator("controller_runtime_reconcile_total"); !ok {
		t.Fatal("controller_runtime_reconcile_total not found in controller-runtime's registry")
	}
	good := []string{
		`sum(rate(idempotent_consumer_dead_lettered_total{reason="handler_failed", namespace="x"}[5m]))`,
		`histogram_quantile(0.9, sum by (le) (rate(idempotent_consumer_transaction_duration_seconds_bucket[5m])))`,
		`idempotent_consumer_batch_size_sum / idempotent_consumer_batch_size_count`,
		`histogram_quantile(0.9, rate(idempotency_operator_maintenance_duration_seconds_bucket[5m]))`,
		`idempotency_operator_partitions_ahead{namespace="a", name="b"} < 2`,
	}
	for _, e := range good {
		if p := k.check("good", e); len(p) > 0 {
			t.Errorf("check(%q) = %v, want no problem", e, p)
		}
	}
	bad := map[string]string{
		`sum(rate(idempotent_consumer_dead_letered_total[5m]))`:           "idempotent_consumer_dead_letered_total",
		`idempotency_operator_partition_ahead < 2`:                        "idempotency_operator_partition_ahead",
		`rate(idempotent_consumer_dead_lettered_total{reasn="x"}[5m])`:    `no label "reasn"`,
		`idempotent_consumer_consumer_lag{component="database"}`:          `no label "component"`,
		`rate(idempotent_consumer_batches_total_bucket[5m])`:              "idempotent_consumer_batches_total_bucket",
		`idempotent_consumer_ready_count`:                                 "idempotent_consumer_ready_count",
		`increase(idempotency_operator_partitions_created_total_sum[1h])`: "idempotency_operator_partitions_created_total_sum",
		`idempotency_operator_partitions_count`:                           "idempotency_operator_partitions_count",
	}
	for e, want := range bad {
		p := k.check("bad", e)
		if len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), want) {
			t.Errorf("check(%q) = %v, want a problem mentioning %s", e, p, want)
		}
	}
	// A misspelled name inside the real rule file is caught too.
	r := loadRule(t)
	expr := strings.Replace(r.Spec.Groups[0].Rules[0].Expr, "idempotency_operator_", "idempotency_operatr_", 1)
	if expr == r.Spec.Groups[0].Rules[0].Expr || len(k.check("mutated rule", expr)) == 0 {
		t.Errorf("a misspelled metric in %q went unnoticed", expr)
	}
}

// Alerts from issue 8 that must exist.
var requiredAlerts = []string{
	"IdempotencyMaintenanceFailing",  // maintenance failing
	"IdempotencyPartitionsAheadLow",  // fewer than 2 premade partitions ahead
	"IdempotencyDeadLetterRate",      // dead-letter rate
	"IdempotencyOutOfWindowEvents",   // out-of-window events
	"IdempotencyConsumerLagHigh",     // consumer lag
	"IdempotencyConsumerPodNotReady", // consumer not ready
	"IdempotencyInfrastructureErrors",
	// issue 34, the transactional outbox's relay
	"IdempotentOutboxBehind",
	"IdempotentOutboxNoOwner",
	"IdempotentOutboxNoRelay",
	"IdempotentOutboxPublishFailing",
}

var headingRE = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(string(b), -1) {
		var a strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
				a.WriteRune(r)
			case r == ' ':
				a.WriteRune('-')
			}
		}
		out[a.String()] = true
	}
	return out
}

func TestAlertsHaveRunbooks(t *testing.T) {
	r := loadRule(t)
	runbooks := anchors(t, "../../docs/runbooks.md")
	seen := map[string]bool{}
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" {
				continue
			}
			a := rule.Alert
			if seen[a] {
				t.Errorf("alert %s is defined twice", a)
			}
			seen[a] = true
			switch rule.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: severity %q is not critical, warning or info", a, rule.Labels["severity"])
			}
			if rule.For != "" {
				if _, err := time.ParseDuration(rule.For); err != nil {
					t.Errorf("%s: for: %v", a, err)
				}
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(rule.Annotations[k]) == "" {
					t.Errorf("%s: annotation %s is missing", a, k)
				}
			}
			anchor, ok := strings.CutPrefix(rule.Annotations["runbook_url"], runbookBase)
			if !ok {
				t.Errorf("%s: runbook_url %q does not start with %s", a, rule.Annotations["runbook_url"], runbookBase)
			} else if anchor != strings.ToLower(a) || !runbooks[anchor] {
				t.Errorf("%s: runbook_url anchor #%s: want #%s, a heading of docs/runbooks.md", a, anchor, strings.ToLower(a))
			}
		}
	}
	for _, a := range requiredAlerts {
		if !seen[a] {
			t.Errorf("alert %s is missing", a)
		}
	}
	// Every alert-like runbook section belongs to an alert.
	for anchor := range runbooks {
		if strings.HasPrefix(anchor, "idempotency") || strings.HasPrefix(anchor, "idempotentconsumer") ||
			strings.HasPrefix(anchor, "idempotentoutbox") {
			found := false
			for a := range seen {
				found = found || strings.ToLower(a) == anchor
			}
			if !found {
				t.Errorf("docs/runbooks.md has a section #%s for no alert", anchor)
			}
		}
	}
}

func TestDashboard(t *testing.T) {
	d, _ := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" {
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				if p.Datasource["uid"] != "${datasource}" {
					t.Errorf("panel %q does not use the $datasource variable", p.Title)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
}

// TestKustomization renders config/monitoring and checks what the Prometheus
// Operator and Grafana's sidecar need, and that the PodMonitor selects the
// pods of the Deployment the operator builds.
func TestKustomization(t *testing.T) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build config/monitoring: %v", err)
	}
	objs := map[string]*unstructured.Unstructured{}
	podMonitors := map[string]*unstructured.Unstructured{}
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetNamespace() != "idempotency-system" {
			t.Errorf("%s %s is in namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
		}
		objs[u.GetKind()] = u
		if u.GetKind() == "PodMonitor" {
			podMonitors[u.GetName()] = u
		}
	}
	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"} {
		if objs[kind] == nil {
			t.Fatalf("no %s rendered (have %v)", kind, slices.Sorted(maps.Keys(objs)))
		}
	}

	eps, _, _ := unstructured.NestedSlice(objs["ServiceMonitor"].Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["honorLabels"] != true {
		t.Errorf("the ServiceMonitor's endpoint must set honorLabels: the operator's gauges carry the object's namespace: %v", eps)
	}

	cm := objs["ConfigMap"]
	if cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard=1", cm.GetLabels())
	}
	_, raw := loadDashboard(t)
	if got, _, _ := unstructured.NestedString(cm.Object, "data", "idempotency.json"); got != string(raw) {
		t.Error("the ConfigMap does not carry grafana-dashboard.json verbatim")
	}

	// The PodMonitor must select the operator's consumer pods on their port.
	obj := &kafkav1alpha1.IdempotentConsumer{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", UID: "u1"}}
	obj.Spec.Consumer.Sink.Type = kafkav1alpha1.SinkLog
	dep := objects.Deployment(obj, objects.Options{})
	pm := podMonitors["idempotency-operator-consumers"]
	if pm == nil {
		t.Fatalf("no PodMonitor idempotency-operator-consumers (have %v)", slices.Sorted(maps.Keys(podMonitors)))
	}
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		t.Fatal("the PodMonitor has no matchLabels")
	}
	for k, v := range sel {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%s; consumer pods have %v", k, v, dep.Spec.Template.Labels)
		}
	}
	if any, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any"); !any {
		t.Error("the PodMonitor must look in every namespace: consumers run in their object's namespace")
	}
	pes, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(pes) != 1 {
		t.Fatalf("want one podMetricsEndpoint, have %v", pes)
	}
	pe := pes[0].(map[string]any)
	portOK := false
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			portOK = portOK || p.Name == pe["port"]
		}
	}
	if !portOK || pe["path"] != "/metrics" {
		t.Errorf("PodMonitor scrapes port %v path %v; the consumer container serves /metrics on its named port", pe["port"], pe["path"])
	}
	// `name` comes from the instance label, which carries the object's name.
	wantSource := "__meta_kubernetes_pod_label_" + strings.NewReplacer(".", "_", "/", "_", "-", "_").Replace(objects.LabelInstance)
	relabeled := false
	for _, rl := range pe["relabelings"].([]any) {
		m := rl.(map[string]any)
		src, _ := m["sourceLabels"].([]any)
		relabeled = relabeled || m["targetLabel"] == "name" && len(src) == 1 && src[0] == wantSource
	}
	if !relabeled || dep.Spec.Template.Labels[objects.LabelInstance] != obj.Name {
		t.Errorf("the PodMonitor must copy %s (the object's name) into the label `name`", wantSource)
	}

	// The outbox relay pods (issue 34): the Outbox kind's relay pods carry
	// these labels and serve /metrics on the port named http.
	relayPod := map[string]string{
		objects.LabelName:      "outbox-relay",
		objects.LabelInstance:  "orders-outbox",
		objects.LabelManagedBy: objects.ManagedByValue,
	}
	checkPodMonitor(t, podMonitors["idempotency-operator-outbox-relays"], relayPod, "http", wantSource)
	if len(podMonitors) != 2 {
		t.Errorf("want the PodMonitors consumers and outbox-relays, have %v", slices.Sorted(maps.Keys(podMonitors)))
	}
}

// checkPodMonitor checks that pm selects pods labelled podLabels in every
// namespace, scrapes /metrics on their port named port, and copies the
// instance label (the object's name) into `name`.
func checkPodMonitor(t *testing.T, pm *unstructured.Unstructured, podLabels map[string]string, port, instanceSource string) {
	t.Helper()
	if pm == nil {
		t.Error("no PodMonitor idempotency-operator-outbox-relays rendered")
		return
	}
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		t.Errorf("PodMonitor %s has no matchLabels", pm.GetName())
	}
	for k, v := range sel {
		if podLabels[k] != v {
			t.Errorf("PodMonitor %s selects %s=%s; the pods have %v", pm.GetName(), k, v, podLabels)
		}
	}
	if any, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any"); !any {
		t.Errorf("PodMonitor %s must look in every namespace", pm.GetName())
	}
	pes, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(pes) != 1 {
		t.Errorf("PodMonitor %s: want one podMetricsEndpoint, have %v", pm.GetName(), pes)
		return
	}
	pe := pes[0].(map[string]any)
	if pe["port"] != port || pe["path"] != "/metrics" {
		t.Errorf("PodMonitor %s scrapes port %v path %v; want port %s path /metrics", pm.GetName(), pe["port"], pe["path"], port)
	}
	relabeled := false
	rls, _ := pe["relabelings"].([]any)
	for _, rl := range rls {
		m := rl.(map[string]any)
		src, _ := m["sourceLabels"].([]any)
		relabeled = relabeled || m["targetLabel"] == "name" && len(src) == 1 && src[0] == instanceSource
	}
	if !relabeled {
		t.Errorf("PodMonitor %s must copy %s (the object's name) into the label `name`", pm.GetName(), instanceSource)
	}
}
