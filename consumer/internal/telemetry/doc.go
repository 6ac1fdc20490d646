// Package telemetry is what the runtime tells its operators: the Prometheus
// metrics (docs/consumer.md, "Metrics"), readiness (Health, which /readyz
// serves), the OpenTelemetry spans of batches and handler calls (Tracing),
// and the handler calls running, which a shutdown that cannot wait names
// (Calls).
//
// File map:
//   - metrics.go: Metrics, the collectors of both pipelines
//   - external_metrics.go: ExternalMetrics, the external pipeline's own
//   - health.go: Health and the components readiness depends on
//   - tracing.go: Tracing, batch and handler spans
//   - calls.go: Calls, the handler calls running
package telemetry
