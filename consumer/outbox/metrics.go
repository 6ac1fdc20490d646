package outbox

import (
	"github.com/prometheus/client_golang/prometheus"
)

// namespace is the runtime's metric prefix (consumer/internal/telemetry).
const namespace = "idempotent_consumer"

// Reasons of idempotent_consumer_outbox_publish_failures_total.
const (
	ReasonMessageTooLarge = "message_too_large"
	ReasonUnknownTopic    = "unknown_topic"
	ReasonBroker          = "broker"
	ReasonDatabase        = "database"
	// ReasonCursorAhead: the cursor names transaction ids this database has
	// not reached (a logical copy of the outbox, with its cursor, to another
	// cluster); nothing is published until it is reset (CursorAheadError).
	ReasonCursorAhead = "cursor_ahead"
)

// Metrics are the relay's metrics; docs/consumer.md lists them.
type Metrics struct {
	Backlog        prometheus.Gauge
	OldestAge      prometheus.Gauge
	PublishLatency prometheus.Histogram
	Published      prometheus.Counter
	Failures       *prometheus.CounterVec
	Owner          prometheus.Gauge
}

// NewMetrics makes the relay's metrics and registers them with reg (nil:
// not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Backlog: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "outbox_backlog",
			Help: "Outbox rows not yet published (rows at or above the relay's cursor), read by the owning relay; 0 on a relay that does not own the stream."}),
		OldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "outbox_oldest_unpublished_age_seconds",
			Help: "Age of the oldest committed outbox row not yet published; 0 when there is none."}),
		PublishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "outbox_publish_latency_seconds",
			Help:    "Time from an outbox row's insert to the broker's acknowledgement (acks=all) of its publication.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		Published: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "outbox_published_total",
			Help: "Outbox rows published and acknowledged (a repeat after a failure or a takeover counts again)."}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "outbox_publish_failures_total",
			Help: "Failed publish attempts of the relay by reason (message_too_large, unknown_topic, broker, database, cursor_ahead); the relay keeps its place and retries."}, []string{"reason"}),
		Owner: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "outbox_relay_owner",
			Help: "1 while this relay owns the outbox stream (holds the ownership lock), else 0."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Backlog, m.OldestAge, m.PublishLatency, m.Published, m.Failures, m.Owner} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
