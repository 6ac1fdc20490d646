package consumer

import "github.com/prometheus/client_golang/prometheus"

// xmetrics are the metrics of the external-handler processing model.
type xmetrics struct {
	pending *prometheus.GaugeVec // topic: records fetched and not yet durably done
	calls   *prometheus.GaugeVec // topic: handler calls running
	waiting *prometheus.GaugeVec // topic: records queued behind an earlier record of their key
	oldest  *prometheus.GaugeVec // topic, partition: age of the oldest unfinished record
	records *prometheus.CounterVec
	// retryLater counts the pauses taken on RetryLater answers (topic).
	retryLater *prometheus.CounterVec
}

func newXMetrics(reg prometheus.Registerer) (*xmetrics, error) {
	m := &xmetrics{
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "records_in_flight",
			Help: "Records fetched and not yet durably done (recorded, duplicate, skipped or dead-lettered), external handlers.",
		}, []string{"topic"}),
		calls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "handler_calls_in_flight",
			Help: "External handler calls running; at most MaxInFlight.",
		}, []string{"topic"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "records_waiting_for_key",
			Help: "Records ready to be handled that wait behind an earlier record of their lane (their key under Key ordering).",
		}, []string{"topic"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "oldest_unfinished_record_age_seconds",
			Help: "Seconds since the oldest record of the partition that is not durably done was fetched; the committed offset is held there.",
		}, []string{"topic", "partition"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "records_recorded_total",
			Help: "Event ids recorded in the dedup table after their external handler succeeded.",
		}, []string{"topic"}),
		retryLater: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "handler_retry_later_total",
			Help: "Pauses that used no attempt because an external handler was asked to call again later (HTTP Retry-After, 409/425 while the key is being processed).",
		}, []string{"topic"}),
	}
	for _, c := range []prometheus.Collector{m.pending, m.calls, m.waiting, m.oldest, m.records, m.retryLater} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
