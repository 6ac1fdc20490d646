// Command consumer is the ready-made idempotent Kafka consumer: it consumes
// one topic in one consumer group, deduplicates events by their UUID v7 id in
// PostgreSQL and hands each new event to a sink (http, sql, log or none).
// It is configured by CONSUMER_* environment variables or the matching flags;
// see docs/consumer.md or run it with -h.
package main

import (
	"os"

	"github.com/idempotency-dev/operator/consumer/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:], os.Getenv, os.Stderr))
}
