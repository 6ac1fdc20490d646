package consumer_test

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/idempotency-dev/operator/consumer/internal/membudget"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// collecting is a Registerer that keeps what is registered.
type collecting struct{ cs []prometheus.Collector }

func (r *collecting) Register(c prometheus.Collector) error   { r.cs = append(r.cs, c); return nil }
func (r *collecting) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *collecting) Unregister(prometheus.Collector) bool    { return false }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	docRow     = regexp.MustCompile("^\\| `(idempotent_consumer_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\| ?([a-z_, ]*?) ?\\|")
)

// TestMetricsTableMatchesTheCode: the metrics table of docs/consumer.md
// lists exactly the metrics the runtime registers (internal/telemetry,
// internal/membudget and the outbox relay's), each with its type and
// its labels, so a metric or label added, renamed or dropped in the code
// fails here until the table says so.
func TestMetricsTableMatchesTheCode(t *testing.T) {
	reg := &collecting{}
	if _, err := telemetry.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := telemetry.NewExternalMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := membudget.New(1<<20, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	type metric struct{ kind, labels string }
	code := map[string]metric{}
	for _, c := range reg.cs {
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			s := d.String()
			name := descName.FindStringSubmatch(s)[1]
			var labels []string
			if m := descLabels.FindStringSubmatch(s); m != nil && m[1] != "" {
				labels = strings.Split(m[1], ",")
			}
			code[name] = metric{kind: kindOf(t, c), labels: strings.Join(labels, ", ")}
		}
	}
	f, err := os.Open("../docs/consumer.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := map[string]metric{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := docRow.FindStringSubmatch(sc.Text()); m != nil {
			doc[m[1]] = metric{kind: m[2], labels: strings.TrimSpace(m[3])}
		}
	}
	if len(code) < 20 || len(doc) < 20 {
		t.Fatalf("%d metrics in the code, %d rows in the table: the test reads neither right", len(code), len(doc))
	}
	for name, m := range code {
		d, ok := doc[name]
		switch {
		case !ok:
			t.Errorf("%s (%s, labels %q) is registered but not in docs/consumer.md's metrics table", name, m.kind, m.labels)
		case d.kind != m.kind:
			t.Errorf("%s: the table says %s, the code registers a %s", name, d.kind, m.kind)
		case d.labels != m.labels:
			t.Errorf("%s: the table says labels %q, the code has %q (in that order)", name, d.labels, m.labels)
		}
	}
	for name := range doc {
		if _, ok := code[name]; !ok {
			t.Errorf("docs/consumer.md's metrics table lists %s, which the runtime does not register", name)
		}
	}
}

// kindOf is the metric type a collector exposes.
func kindOf(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	switch c.(type) {
	case prometheus.Gauge, *prometheus.GaugeVec: // before Counter: a Gauge is also a Counter
		return "gauge"
	case prometheus.Counter, *prometheus.CounterVec:
		return "counter"
	case prometheus.Histogram, *prometheus.HistogramVec:
		return "histogram"
	}
	// Anything else: ask it for a sample.
	ch := make(chan prometheus.Metric, 1)
	go func() { c.Collect(ch); close(ch) }()
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		switch {
		case pb.Counter != nil:
			return "counter"
		case pb.Gauge != nil:
			return "gauge"
		case pb.Histogram != nil:
			return "histogram"
		}
	}
	t.Fatalf("cannot tell the type of %T", c)
	return ""
}
