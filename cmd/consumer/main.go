// Command consumer is the ready-made idempotent Kafka consumer: it consumes
// one topic in one consumer group, deduplicates events by their UUID v7 id in
// PostgreSQL and hands each new event to a sink (http, sql, log or none).
// It is configured by CONSUMER_* environment variables or the matching flags;
// see docs/consumer.md or run it with -h. --version prints the version.
package main

import (
	"fmt"
	"os"

	"github.com/idempotency-dev/operator/consumer/app"
	"github.com/idempotency-dev/operator/consumer/version"
)

func main() {
	args := os.Args[1:]
	// --version stands alone, so that it works without any configuration
	// (every other flag maps to a CONSUMER_* variable; see consumer/app).
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Println(version.Get())
		return
	}
	os.Exit(app.Main(args, os.Getenv, os.Stderr))
}
