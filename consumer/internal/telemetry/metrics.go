package telemetry

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "idempotent_consumer"

// Metrics are the runtime's Prometheus collectors (docs/consumer.md,
// "Metrics").
type Metrics struct {
	Processed     *prometheus.CounterVec // topic
	Duplicates    *prometheus.CounterVec // topic
	DeadLettered  *prometheus.CounterVec // topic, reason
	Skipped       *prometheus.CounterVec // topic, reason
	OutsideWindow *prometheus.CounterVec // topic
	HandlerErrors *prometheus.CounterVec // topic
	InfraErrors   *prometheus.CounterVec // component
	TxTimeouts    *prometheus.CounterVec // topic
	BatchSize     prometheus.Histogram   //
	TxSeconds     prometheus.Histogram   //
	CommitSeconds prometheus.Histogram   //
	Lag           *prometheus.GaugeVec   // topic, partition
	Committed     *prometheus.GaugeVec   // topic, partition
	Assigned      prometheus.Gauge       //
	Ready         prometheus.Gauge       //
	Rebalances    prometheus.Counter     //
	Batches       *prometheus.CounterVec // topic

	DeadLetterValuesDropped *prometheus.CounterVec // topic
	// partition positions and the durability check
	Rewinds         *prometheus.CounterVec // topic
	LostToRetention *prometheus.CounterVec // topic
	DurabilityRisk  *prometheus.GaugeVec   // reason
	// EndToEnd is the time from a record's timestamp to its outcome being
	// durable: its effect and dedup row committed, its dead letter written,
	// or it found a duplicate.
	EndToEnd *prometheus.HistogramVec // topic
	// ReplayRecords counts the records a dead-letter replay processed, by
	// outcome, once durable.
	ReplayRecords *prometheus.CounterVec // outcome
}

// ObserveEndToEnd observes, for each record time in ts, the time since it
// (records without a timestamp are left out).
func (m *Metrics) ObserveEndToEnd(topic string, now time.Time, ts ...time.Time) {
	o := m.EndToEnd.WithLabelValues(topic)
	for _, t := range ts {
		if !t.IsZero() {
			o.Observe(now.Sub(t).Seconds())
		}
	}
}

// NewMetrics registers the collectors with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "events_processed_total",
			Help: "Events whose handler succeeded and whose transaction Committed.",
		}, []string{"topic"}),
		Duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "duplicates_skipped_total",
			Help: "Events Skipped because their id was already in the dedup table (or earlier in the same batch).",
		}, []string{"topic"}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "dead_lettered_total",
			Help: "Events written to the dead-letter topic, by reason.",
		}, []string{"topic", "reason"}),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "skipped_total",
			Help: "Events passed over under the Skip policy, by reason.",
		}, []string{"topic", "reason"}),
		OutsideWindow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "out_of_window_total",
			Help: "Events whose id has no partition in the dedup table, whatever their policy.",
		}, []string{"topic"}),
		HandlerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "handler_errors_total",
			Help: "Failed handler attempts (each retry counts).",
		}, []string{"topic"}),
		InfraErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "infrastructure_errors_total",
			Help: "Database or broker failures that paused processing, by component.",
		}, []string{"component"}),
		TxTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "transaction_timeouts_total",
			Help: "Batch transactions the server ended with idle_in_transaction_session_timeout or transaction_timeout; each halves the records per transaction.",
		}, []string{"topic"}),
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "batch_size",
			Help:    "Records per Processed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 15),
		}),
		TxSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "transaction_duration_seconds",
			Help:    "Duration of one batch transaction, begin to commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "offset_commit_duration_seconds",
			Help:    "Duration of one Kafka offset commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "consumer_lag",
			Help: "Records between the last Committed offset and the partition's high watermark, per Assigned partition.",
		}, []string{"topic", "partition"}),
		Committed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "committed_offset",
			Help: "Last offset Committed by this process, per Assigned partition.",
		}, []string{"topic", "partition"}),
		Assigned: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "assigned_partitions",
			Help: "Partitions Assigned to this process in the current generation.",
		}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "ready",
			Help: "1 when the consumer is in a group generation and its last database and broker operations succeeded.",
		}),
		Rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "generations_total",
			Help: "Consumer group generations joined.",
		}),
		Batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "batches_total",
			Help: "Batches Committed.",
		}, []string{"topic"}),
		DeadLetterValuesDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "dead_letter_values_dropped_total",
			Help: "Dead letters written without their value because the record alone exceeds the dead-letter topic's max.message.bytes.",
		}, []string{"topic"}),
		Rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "position_rewinds_total",
			Help: "Partitions restarted from the database's position because it was behind the Committed offset or this process's last batch: the database lost Committed transactions (a failover to an asynchronous standby, a crash with synchronous_commit off).",
		}, []string{"topic"}),
		LostToRetention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "records_lost_to_retention_total",
			Help: "Records between a partition's position (Kafka's Committed offset or the database's) and the start of its log when the partition started or went back to the database's position: deleted by the topic's retention before their effects were durable, so never Processed.",
		}, []string{"topic"}),
		EndToEnd: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "end_to_end_seconds",
			Help:    "Time from a record's timestamp (the producer's, or the broker's log append time) to its outcome being durable: its effect and dedup row Committed, its dead letter written, or found a duplicate.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"topic"}),
		ReplayRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "replay_records_total",
			Help: "Dead letters a replay processed, by outcome (applied, duplicates, skipped, failedAgain, parked), once durable.",
		}, []string{"outcome"}),
		DurabilityRisk: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "database_durability_risk",
			Help: "1 for each way the database can lose acknowledged commits, found at start-up: reason SynchronousCommitOff (a crash) or AsynchronousStandby (a failover); 0 otherwise.",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{
		m.Processed, m.Duplicates, m.DeadLettered, m.Skipped, m.OutsideWindow, m.HandlerErrors,
		m.InfraErrors, m.TxTimeouts, m.BatchSize, m.TxSeconds, m.CommitSeconds, m.Lag, m.Committed, m.Assigned,
		m.Ready, m.Rebalances, m.Batches, m.DeadLetterValuesDropped, m.Rewinds, m.LostToRetention, m.DurabilityRisk,
		m.EndToEnd, m.ReplayRecords,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// PartLabel is the partition label value of p.
func PartLabel(p int) string { return strconv.Itoa(p) }
