// Package app is the ready-made consumer behind cmd/consumer: it reads its
// configuration from flags and CONSUMER_* environment variables (names in
// consumer/envvars), validates all of it before connecting to anything,
// picks a sink, serves /healthz /readyz /metrics, and runs the consumer until
// SIGTERM or SIGINT.
package app
