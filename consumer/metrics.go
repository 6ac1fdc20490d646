package consumer

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsNamespace prefixes every metric name.
const MetricsNamespace = "idempotent_consumer"

type metrics struct {
	processed     *prometheus.CounterVec // topic
	duplicates    *prometheus.CounterVec // topic
	deadLettered  *prometheus.CounterVec // topic, reason
	skipped       *prometheus.CounterVec // topic, reason
	outsideWindow *prometheus.CounterVec // topic
	handlerErrors *prometheus.CounterVec // topic
	infraErrors   *prometheus.CounterVec // component
	txTimeouts    *prometheus.CounterVec // topic
	batchSize     prometheus.Histogram   //
	txSeconds     prometheus.Histogram   //
	commitSeconds prometheus.Histogram   //
	lag           *prometheus.GaugeVec   // topic, partition
	committed     *prometheus.GaugeVec   // topic, partition
	assigned      prometheus.Gauge       //
	ready         prometheus.Gauge       //
	rebalances    prometheus.Counter     //
	batches       *prometheus.CounterVec // topic

	deadLetterValuesDropped *prometheus.CounterVec // topic
	// positions.go and the durability check
	rewinds         *prometheus.CounterVec // topic
	lostToRetention *prometheus.CounterVec // topic
	durabilityRisk  *prometheus.GaugeVec   // reason
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "events_processed_total",
			Help: "Events whose handler succeeded and whose transaction committed.",
		}, []string{"topic"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "duplicates_skipped_total",
			Help: "Events skipped because their id was already in the dedup table (or earlier in the same batch).",
		}, []string{"topic"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "dead_lettered_total",
			Help: "Events written to the dead-letter topic, by reason.",
		}, []string{"topic", "reason"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "skipped_total",
			Help: "Events passed over under the Skip policy, by reason.",
		}, []string{"topic", "reason"}),
		outsideWindow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "out_of_window_total",
			Help: "Events whose id has no partition in the dedup table, whatever their policy.",
		}, []string{"topic"}),
		handlerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "handler_errors_total",
			Help: "Failed handler attempts (each retry counts).",
		}, []string{"topic"}),
		infraErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "infrastructure_errors_total",
			Help: "Database or broker failures that paused processing, by component.",
		}, []string{"component"}),
		txTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "transaction_timeouts_total",
			Help: "Batch transactions the server ended with idle_in_transaction_session_timeout or transaction_timeout; each halves the records per transaction.",
		}, []string{"topic"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "batch_size",
			Help:    "Records per processed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 15),
		}),
		txSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "transaction_duration_seconds",
			Help:    "Duration of one batch transaction, begin to commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "offset_commit_duration_seconds",
			Help:    "Duration of one Kafka offset commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "consumer_lag",
			Help: "Records between the last committed offset and the partition's high watermark, per assigned partition.",
		}, []string{"topic", "partition"}),
		committed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "committed_offset",
			Help: "Last offset committed by this process, per assigned partition.",
		}, []string{"topic", "partition"}),
		assigned: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "assigned_partitions",
			Help: "Partitions assigned to this process in the current generation.",
		}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "ready",
			Help: "1 when the consumer is in a group generation and its last database and broker operations succeeded.",
		}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "generations_total",
			Help: "Consumer group generations joined.",
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "batches_total",
			Help: "Batches committed.",
		}, []string{"topic"}),
		deadLetterValuesDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "dead_letter_values_dropped_total",
			Help: "Dead letters written without their value because the record alone exceeds the dead-letter topic's max.message.bytes.",
		}, []string{"topic"}),
		rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "position_rewinds_total",
			Help: "Partitions restarted from the database's position because it was behind the committed offset or this process's last batch: the database lost committed transactions (a failover to an asynchronous standby, a crash with synchronous_commit off).",
		}, []string{"topic"}),
		lostToRetention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "records_lost_to_retention_total",
			Help: "Records between a partition's position (Kafka's committed offset or the database's) and the start of its log when the partition started or went back to the database's position: deleted by the topic's retention before their effects were durable, so never processed.",
		}, []string{"topic"}),
		durabilityRisk: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "database_durability_risk",
			Help: "1 for each way the database can lose acknowledged commits, found at start-up: reason SynchronousCommitOff (a crash) or AsynchronousStandby (a failover); 0 otherwise.",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{
		m.processed, m.duplicates, m.deadLettered, m.skipped, m.outsideWindow, m.handlerErrors,
		m.infraErrors, m.txTimeouts, m.batchSize, m.txSeconds, m.commitSeconds, m.lag, m.committed, m.assigned,
		m.ready, m.rebalances, m.batches, m.deadLetterValuesDropped, m.rewinds, m.lostToRetention, m.durabilityRisk,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func partLabel(p int) string { return strconv.Itoa(p) }
