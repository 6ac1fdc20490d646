package app

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envelope"
	ev "github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// setting is one configuration input: an environment variable and its flag.
type setting struct {
	env  string
	def  string
	help string
}

// settings lists every input with its default, in documentation order.
var settings = []setting{
	{ev.Brokers, "", "Kafka bootstrap brokers, comma-separated host:port (required)"},
	{ev.Topic, "", "topic to consume (required)"},
	{ev.Group, "", "consumer group id; also the dedup key's group (required)"},
	{ev.ClientID, consumer.DefaultClientID, "Kafka client id and PostgreSQL application_name"},
	{ev.DeadLetterTopic, "", `dead-letter topic (default "<topic>.dlq"); must exist`},
	{ev.StartOffset, consumer.StartEarliest, "where a group without committed offsets starts: earliest or latest"},
	{ev.Isolation, string(consumer.IsolationReadCommitted), "ReadCommitted (skip records of aborted transactions) or ReadUncommitted"},
	{ev.SessionTimeout, consumer.DefaultSessionTimeout.String(), "group session timeout"},
	{ev.HeartbeatInterval, "", "group heartbeat interval (default min(500ms, session timeout/3))"},
	{ev.RebalanceTimeout, consumer.DefaultRebalanceTimeout.String(), "group rebalance timeout"},
	{ev.TLSEnabled, "false", "connect to the brokers with TLS (implied by the other TLS settings)"},
	{ev.TLSCAFile, "", "PEM CA bundle to verify the brokers with (default: system roots)"},
	{ev.TLSCertFile, "", "PEM client certificate, for mutual TLS"},
	{ev.TLSKeyFile, "", "PEM client key, for mutual TLS"},
	{ev.TLSInsecureSkipVerify, "false", "do not verify the brokers' certificates (development only)"},
	{ev.SASLMechanism, "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none)"},
	{ev.SASLUsername, "", "SASL user name"},
	{ev.SASLPassword, "", "SASL password (secret; prefer the environment variable)"},
	{ev.DatabaseURL, "", "PostgreSQL connection URL or DSN (secret; required; falls back to DATABASE_URL)"},
	{ev.DatabaseMaxConns, "8", "most database connections"},
	{ev.DatabasePooler, "", "transaction: the URL reaches PostgreSQL through a transaction pooler (PgBouncer pool_mode=transaction)"},
	{ev.TableSchema, dedup.DefaultSchema, "schema of the dedup table"},
	{ev.TableName, dedup.DefaultTableName, "name of the dedup table"},
	{ev.DedupScope, string(dedup.DefaultScope), "dedup key: ConsumerGroup (event id + group) or Global (event id)"},
	{ev.BatchMaxMessages, strconv.Itoa(consumer.DefaultBatchSize), "most records per partition per transaction"},
	{ev.BatchMaxWait, consumer.DefaultBatchWait.String(), "how long a batch waits to fill after its first record"},
	{ev.MaxEventBytes, strconv.Itoa(envelope.DefaultMaxBytes), "larger record values are rejected as oversized (-1: no limit)"},
	{ev.Envelope, string(envelope.ModeJSON), "where the event id is: json, cloudevents or auto"},
	{ev.IDField, envelope.DefaultIDField, "JSON envelope: the event id field"},
	{ev.TypeField, envelope.DefaultTypeField, `JSON envelope: the event type field ("-": none)`},
	{ev.TimeField, envelope.DefaultTimeField, `JSON envelope: the RFC 3339 occurrence time field ("-": none)`},
	{ev.PayloadField, "", "JSON envelope: hand this field to the sink instead of the whole value"},
	{ev.HandlerMaxAttempts, strconv.Itoa(consumer.DefaultHandlerMaxAttempts), "sink attempts per event before it is dead-lettered"},
	{ev.HandlerBackoffInitial, consumer.DefaultHandlerBackoff.String(), "first pause between sink attempts (doubles)"},
	{ev.HandlerBackoffMax, consumer.DefaultHandlerBackoffMax.String(), "longest pause between sink attempts"},
	{ev.RetryBackoffMax, consumer.DefaultRetryBackoffMax.String(), "longest pause between retries after a database or broker failure"},
	{ev.RetryLaterMax, consumer.DefaultRetryLaterMax.String(), "http sink: the longest one event pauses, without using attempts, on answers that ask to retry later (Retry-After, 409, 425, 429); then they use attempts"},
	{ev.ShutdownTimeout, consumer.DefaultShutdownTimeout.String(), "on SIGTERM, how long the batches in flight get to finish and commit"},
	{ev.Ordering, "", "which records of a partition the http sink sends concurrently: Key (default: same key in offset order), Partition or Unordered; the sql sink accepts only Partition"},
	{ev.MaxInFlight, "", "http sink: most requests in flight across all partitions (default 64)"},
	{ev.PolicyNotJSON, string(consumer.PolicyDeadLetter), "policy for not_json: DeadLetter, Skip or Stop"},
	{ev.PolicyMissingID, string(consumer.PolicyDeadLetter), "policy for missing_id"},
	{ev.PolicyInvalidUUID, string(consumer.PolicyDeadLetter), "policy for invalid_uuid"},
	{ev.PolicyWrongUUIDVersion, string(consumer.PolicyDeadLetter), "policy for wrong_uuid_version"},
	{ev.PolicyOversized, string(consumer.PolicyDeadLetter), "policy for oversized"},
	{ev.PolicyOutsideWindow, string(consumer.PolicyDeadLetter), "policy for outside_window: DeadLetter, Skip, Stop or Process"},
	{ev.PolicyHandlerFailed, string(consumer.PolicyDeadLetter), "policy for handler_failed"},
	{ev.ListenAddr, ":8080", "address for /healthz, /readyz and /metrics (the flag set empty: no server; an empty variable counts as unset)"},
	{ev.LogLevel, "info", "log level: debug, info, warn or error"},
	{ev.LogFormat, "json", "log format: json or text"},
	{ev.MemoryLimit, "", "the container's memory limit in bytes (the operator passes limits.memory): sets the Go memory limit to 70% of it unless GOMEMLIMIT is set, and the records in flight to 50% (empty: unbounded)"},
	{ev.Sink, "", "what to do with each new event: http, sql, log or none (required)"},
	{ev.SinkHTTPURL, "", "http sink: URL to POST each event to"},
	{ev.SinkHTTPTimeout, sink.DefaultHTTPTimeout.String(), "http sink: request timeout"},
	{ev.SinkHTTPAuthorization, "", "http sink: Authorization header value (secret)"},
	{ev.SinkHTTPRetryable, sink.DefaultRetryableStatusesText, `http sink: the answers retried rather than dead-lettered at once, as statuses and ranges ("none": every non-2xx answer is dead-lettered)`},
	{ev.SinkHTTPIdempotencyKey, sink.DefaultIdempotencyKey, "http sink: Idempotency-Key template with {eventId} (required), {group}, {topic}; changing it on a live stream makes redeliveries look new to the provider"},
	{ev.SinkSQLStatement, "", "sql sink: statement run per new event with $1..$8 (see docs/consumer.md)"},
}

// FlagName is the command-line flag for an environment variable:
// CONSUMER_BATCH_MAX_WAIT is --batch-max-wait.
func FlagName(env string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "CONSUMER_")), "_", "-")
}

// SettingError names the setting that is wrong, by variable and flag.
type SettingError struct {
	Env     string
	Problem string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("%s (--%s): %s", e.Env, FlagName(e.Env), e.Problem)
}

// Options is the whole configuration of the binary.
type Options struct {
	Consumer   consumer.Config
	Sink       string
	HTTP       sink.HTTPConfig
	SQL        sink.SQLConfig
	ListenAddr string
	LogLevel   slog.Level
	LogFormat  string
	Secrets    []string // values to keep out of logs
	// MemoryLimit is the container's memory limit in bytes (0: none given);
	// GoMemLimitSet says GOMEMLIMIT is set, which then wins over it.
	MemoryLimit   int64
	GoMemLimitSet bool
	// Tracing says the OTEL_* variables ask for spans exported over OTLP
	// (otel.go); Getenv is where the exporter's settings are read.
	Tracing bool
	Getenv  func(string) string
}

// The shares of CONSUMER_MEMORY_LIMIT, in percent: the Go runtime's soft
// memory limit (debug.SetMemoryLimit), and the consumer's memory budget for
// records (Config.MemoryBudget). The Go limit covers the heap, stacks and
// runtime metadata, not the binary's own pages, and the collector lets the
// heap reach it before working hard: at 70% the resident set peaks near 0.72
// of the container's limit when large records fill the budget (BENCH=memory).
// The budget's 50% leaves the rest of the Go limit to decoded events, the
// handler's allocations, buffers and garbage not yet collected.
const (
	GoMemLimitPercent   = 70
	MemoryBudgetPercent = 50
)

// percentOf is p% of n without overflow.
func percentOf(n, p int64) int64 { return n/100*p + n%100*p/100 }

// values resolves every setting: flag, else environment, else default.
type values struct {
	m    map[string]string
	errs []error
}

func (v *values) str(env string) string { return v.m[env] }

func (v *values) fail(env, format string, args ...any) {
	v.errs = append(v.errs, &SettingError{Env: env, Problem: fmt.Sprintf(format, args...)})
}

func (v *values) duration(env string) time.Duration {
	s := v.m[env]
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		v.fail(env, "%q is not a duration such as 500ms or 10s", s)
		return 0
	}
	return d
}

func (v *values) int(env string) int {
	s := v.m[env]
	n, err := strconv.Atoi(s)
	if err != nil {
		v.fail(env, "%q is not an integer", s)
	}
	return n
}

// int32 is int for a setting the runtime keeps in an int32: a value out of
// its range is an error, not a wrapped number.
func (v *values) int32(env string) int32 {
	s := v.m[env]
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		v.fail(env, "%q is not an integer from 1 to %d", s, math.MaxInt32)
	}
	return int32(n)
}

func (v *values) bool(env string) bool {
	s := v.m[env]
	b, err := strconv.ParseBool(s)
	if err != nil {
		v.fail(env, "%q is not true or false", s)
	}
	return b
}

// Parse reads args and the environment into Options and validates them, so
// that every mistake is reported before anything connects.
func Parse(args []string, getenv func(string) string, usage io.Writer) (Options, error) {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	fs.SetOutput(usage)
	flags := map[string]*string{}
	for _, s := range settings {
		def := s.def
		help := s.help + " [$" + s.env + "]"
		flags[s.env] = fs.String(FlagName(s.env), def, help)
	}
	fs.Usage = func() {
		fmt.Fprintln(usage, "Usage: consumer [flags]\n\nEvery flag can also be set by the environment variable in brackets; a flag wins.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	v := &values{m: map[string]string{}}
	for _, s := range settings {
		val := s.def
		if e := getenv(s.env); e != "" {
			val = e
		}
		if s.env == ev.DatabaseURL && val == "" {
			val = getenv(ev.DatabaseURLFallback)
		}
		if set[FlagName(s.env)] {
			val = *flags[s.env]
		}
		v.m[s.env] = strings.TrimSpace(val)
	}
	o, err := build(v)
	o.GoMemLimitSet = getenv("GOMEMLIMIT") != ""
	o.Tracing, o.Getenv = tracingWanted(getenv), getenv
	return o, err
}
