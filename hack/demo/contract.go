package main

import "github.com/idempotency-dev/operator/consumer"

// Names the demo reads from the consumer's observable surface.
const (
	duplicatesMetric    = consumer.MetricsNamespace + "_duplicates_skipped_total"
	reasonHeader        = consumer.HeaderDLQReason
	outsideWindowReason = "outside_window"
	handlerFailedReason = "handler_failed"
)
