package telemetry

import "github.com/prometheus/client_golang/prometheus"

// ExternalMetrics are the metrics of the external-handler processing model.
type ExternalMetrics struct {
	Pending *prometheus.GaugeVec // topic: Records fetched and not yet durably done
	Calls   *prometheus.GaugeVec // topic: handler Calls running
	Waiting *prometheus.GaugeVec // topic: Records queued behind an earlier record of their key
	Oldest  *prometheus.GaugeVec // topic, partition: age of the Oldest unfinished record
	Records *prometheus.CounterVec
	// RetryLater counts the pauses taken on RetryLater answers (topic).
	RetryLater *prometheus.CounterVec
}

// NewExternalMetrics registers the collectors with reg.
func NewExternalMetrics(reg prometheus.Registerer) (*ExternalMetrics, error) {
	m := &ExternalMetrics{
		Pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "records_in_flight",
			Help: "Records fetched and not yet durably done (recorded, duplicate, skipped or dead-lettered), external handlers.",
		}, []string{"topic"}),
		Calls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "handler_calls_in_flight",
			Help: "External handler Calls running; at most MaxInFlight.",
		}, []string{"topic"}),
		Waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "records_waiting_for_key",
			Help: "Records ready to be handled that wait behind an earlier record of their lane (their key under Key ordering).",
		}, []string{"topic"}),
		Oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "oldest_unfinished_record_age_seconds",
			Help: "Seconds since the Oldest record of the partition that is not durably done was fetched; the committed offset is held there.",
		}, []string{"topic", "partition"}),
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "records_recorded_total",
			Help: "Event ids recorded in the dedup table after their external handler succeeded.",
		}, []string{"topic"}),
		RetryLater: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "handler_retry_later_total",
			Help: "Pauses that used no attempt because an external handler was asked to call again later (HTTP Retry-After, 409/425 while the key is being processed).",
		}, []string{"topic"}),
	}
	for _, c := range []prometheus.Collector{m.Pending, m.Calls, m.Waiting, m.Oldest, m.Records, m.RetryLater} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
