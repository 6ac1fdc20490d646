package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	{ev.HeartbeatInterval, "", "group heartbeat interval (default min(3s, session timeout/3))"},
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

func build(v *values) (Options, error) {
	var o Options
	c := &o.Consumer
	buildKafka(v, c)
	buildProcessing(v, c)
	buildMemory(v, &o)
	buildLogging(v, &o)
	buildSinkSettings(v, &o)
	collectSecrets(&o)

	// In the library zero means "the default"; here a zero is a mistake.
	for _, p := range []struct {
		env string
		n   int
	}{{ev.BatchMaxMessages, c.BatchSize}, {ev.HandlerMaxAttempts, c.HandlerMaxAttempts}, {ev.DatabaseMaxConns, int(c.DatabaseMaxConns)}} {
		if p.n < 1 && v.m[p.env] != "" {
			v.fail(p.env, "%d: must be at least 1", p.n)
		}
	}
	if len(v.errs) == 0 {
		if err := c.Validate(); err != nil {
			v.errs = append(v.errs, configError(err))
		}
	}
	if len(v.errs) > 0 {
		return o, errors.Join(v.errs...)
	}
	return o, nil
}

// buildKafka reads the broker, topic, group and connection settings.
func buildKafka(v *values, c *consumer.Config) {
	for _, b := range strings.Split(v.str(ev.Brokers), ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.Brokers = append(c.Brokers, b)
		}
	}
	c.Topic = v.str(ev.Topic)
	c.Group = v.str(ev.Group)
	c.ClientID = v.str(ev.ClientID)
	c.DeadLetterTopic = v.str(ev.DeadLetterTopic)
	c.StartOffset = strings.ToLower(v.str(ev.StartOffset))
	if iso, err := consumer.ParseIsolation(v.str(ev.Isolation)); err != nil {
		v.fail(ev.Isolation, "%v", err)
	} else {
		c.Isolation = iso
	}
	c.SessionTimeout = v.duration(ev.SessionTimeout)
	c.HeartbeatInterval = v.duration(ev.HeartbeatInterval)
	c.RebalanceTimeout = v.duration(ev.RebalanceTimeout)

	tlsCfg, err := buildTLS(v)
	if err != nil {
		v.errs = append(v.errs, err)
	}
	c.TLS = tlsCfg
	c.SASL = consumer.SASL{Mechanism: strings.ToUpper(v.str(ev.SASLMechanism)), Username: v.str(ev.SASLUsername), Password: v.m[ev.SASLPassword]}
}

// buildProcessing reads the database, table, batch, envelope, handler and
// policy settings.
func buildProcessing(v *values, c *consumer.Config) {
	c.DatabaseURL = v.m[ev.DatabaseURL]
	c.DatabaseMaxConns = int32(v.int(ev.DatabaseMaxConns))
	scope := dedup.Scope(v.str(ev.DedupScope))
	switch strings.ToLower(string(scope)) {
	case "consumergroup":
		scope = dedup.ScopeConsumerGroup
	case "global":
		scope = dedup.ScopeGlobal
	}
	c.Table = dedup.Table{Schema: v.str(ev.TableSchema), Name: v.str(ev.TableName), Scope: scope}
	c.BatchSize = v.int(ev.BatchMaxMessages)
	c.BatchWait = v.duration(ev.BatchMaxWait)
	c.Envelope = consumer.Envelope{
		Mode:         envelope.Mode(strings.ToLower(v.str(ev.Envelope))),
		IDField:      v.str(ev.IDField),
		TypeField:    v.str(ev.TypeField),
		TimeField:    v.str(ev.TimeField),
		PayloadField: v.str(ev.PayloadField),
		MaxBytes:     v.int(ev.MaxEventBytes),
	}
	c.HandlerMaxAttempts = v.int(ev.HandlerMaxAttempts)
	c.HandlerBackoff = v.duration(ev.HandlerBackoffInitial)
	c.HandlerBackoffMax = v.duration(ev.HandlerBackoffMax)
	c.RetryBackoffMax = v.duration(ev.RetryBackoffMax)
	c.RetryLaterMax = v.duration(ev.RetryLaterMax)
	c.ShutdownTimeout = v.duration(ev.ShutdownTimeout)
	if s := v.str(ev.Ordering); s != "" {
		var err error
		if c.Ordering, err = consumer.ParseOrdering(s); err != nil {
			v.fail(ev.Ordering, "%v", err)
		}
	}
	if v.str(ev.MaxInFlight) != "" {
		if c.MaxInFlight = v.int(ev.MaxInFlight); c.MaxInFlight < 1 {
			v.fail(ev.MaxInFlight, "%d: must be at least 1", c.MaxInFlight)
		}
	}
	c.Policies = map[consumer.Reason]consumer.Policy{}
	for env, r := range policyVars {
		p, err := consumer.ParsePolicy(v.str(env))
		if err != nil {
			v.fail(env, "%v", err)
			continue
		}
		c.Policies[r] = p
	}
}

// buildMemory reads the container's memory limit and derives the consumer's
// memory budget from it.
func buildMemory(v *values, o *Options) {
	c := &o.Consumer
	if s := v.str(ev.MemoryLimit); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			v.fail(ev.MemoryLimit, "%q is not a number of bytes (the downward API's limits.memory)", s)
		} else {
			o.MemoryLimit = n
			c.MemoryBudget = percentOf(n, MemoryBudgetPercent)
		}
	}
}

// buildLogging reads the listen address and the log settings.
func buildLogging(v *values, o *Options) {
	o.ListenAddr = v.str(ev.ListenAddr)
	switch strings.ToLower(v.str(ev.LogLevel)) {
	case "debug":
		o.LogLevel = slog.LevelDebug
	case "info", "":
		o.LogLevel = slog.LevelInfo
	case "warn", "warning":
		o.LogLevel = slog.LevelWarn
	case "error":
		o.LogLevel = slog.LevelError
	default:
		v.fail(ev.LogLevel, "%q is not debug, info, warn or error", v.str(ev.LogLevel))
	}
	o.LogFormat = strings.ToLower(v.str(ev.LogFormat))
	if o.LogFormat != "json" && o.LogFormat != "text" {
		v.fail(ev.LogFormat, "%q is not json or text", o.LogFormat)
	}
}

// buildSinkSettings reads the sink settings and checks that those of
// another sink are not set.
func buildSinkSettings(v *values, o *Options) {
	c := &o.Consumer
	o.Sink = strings.ToLower(v.str(ev.Sink))
	switch o.Sink {
	case "http":
		o.HTTP = sink.HTTPConfig{URL: v.str(ev.SinkHTTPURL), Timeout: v.duration(ev.SinkHTTPTimeout), Authorization: v.m[ev.SinkHTTPAuthorization],
			IdempotencyKey: v.str(ev.SinkHTTPIdempotencyKey), Group: c.Group}
		sts := v.str(ev.SinkHTTPRetryable)
		if strings.EqualFold(strings.TrimSpace(sts), "none") {
			sts = ""
		}
		var errSts, errKey error
		if o.HTTP.RetryableStatuses, errSts = sink.ParseStatuses(sts); errSts != nil {
			v.fail(ev.SinkHTTPRetryable, "%v", errSts)
		}
		if _, errKey = sink.ParseIdempotencyKey(o.HTTP.IdempotencyKey); errKey != nil {
			v.fail(ev.SinkHTTPIdempotencyKey, "%v", errKey)
		}
		if o.HTTP.URL == "" {
			v.fail(ev.SinkHTTPURL, "must be set with sink http")
		} else if _, err := sink.HTTP(o.HTTP); err != nil && errSts == nil && errKey == nil {
			v.fail(ev.SinkHTTPURL, "%v", err)
		}
	case "sql":
		o.SQL = sink.SQLConfig{Statement: v.m[ev.SinkSQLStatement]}
		if _, err := sink.SQL(o.SQL); err != nil {
			v.fail(ev.SinkSQLStatement, "%v", err)
		}
	case "log", "none":
	case "":
		v.fail(ev.Sink, "must be set: http, sql, log or none")
	default:
		v.fail(ev.Sink, "%q is not http, sql, log or none", o.Sink)
	}
	if o.Sink != "http" && v.str(ev.SinkHTTPURL) != "" {
		v.fail(ev.SinkHTTPURL, "is set but the sink is %q", o.Sink)
	}
	if o.Sink != "http" && c.Ordering != "" && c.Ordering != consumer.OrderingPartition {
		v.fail(ev.Ordering, "%s is for the http sink; the %q sink handles a partition in offset order (Partition)", c.Ordering, o.Sink)
	}
	if o.Sink != "sql" && v.str(ev.SinkSQLStatement) != "" {
		v.fail(ev.SinkSQLStatement, "is set but the sink is %q", o.Sink)
	}
}

// collectSecrets lists the values that must never be logged.
func collectSecrets(o *Options) {
	c := &o.Consumer
	for _, s := range []string{c.DatabaseURL, c.SASL.Password, o.HTTP.Authorization} {
		if s != "" {
			o.Secrets = append(o.Secrets, s)
		}
	}
	o.Secrets = append(o.Secrets, consumer.DSNSecrets(c.DatabaseURL)...) // password, sslpassword
	o.Secrets = append(o.Secrets, o.HTTP.Secrets()...)                   // the token and the URL's path and query tokens
}

var policyVars = map[string]consumer.Reason{
	ev.PolicyNotJSON:          consumer.ReasonNotJSON,
	ev.PolicyMissingID:        consumer.ReasonMissingID,
	ev.PolicyInvalidUUID:      consumer.ReasonInvalidUUID,
	ev.PolicyWrongUUIDVersion: consumer.ReasonWrongUUIDVersion,
	ev.PolicyOversized:        consumer.ReasonOversized,
	ev.PolicyOutsideWindow:    consumer.ReasonOutsideWindow,
	ev.PolicyHandlerFailed:    consumer.ReasonHandlerFailed,
}

// configFields maps consumer.Config fields to the variable that sets them.
var configFields = map[string]string{
	"Brokers": ev.Brokers, "Topic": ev.Topic, "Group": ev.Group, "DeadLetterTopic": ev.DeadLetterTopic,
	"StartOffset": ev.StartOffset, "Isolation": ev.Isolation, "SessionTimeout": ev.SessionTimeout, "HeartbeatInterval": ev.HeartbeatInterval,
	"RebalanceTimeout": ev.RebalanceTimeout, "SASL.Mechanism": ev.SASLMechanism, "SASL.Username": ev.SASLUsername,
	"SASL.Password": ev.SASLPassword, "SASL": ev.SASLMechanism, "DatabaseURL": ev.DatabaseURL,
	"DatabaseMaxConns": ev.DatabaseMaxConns, "Table": ev.TableName, "BatchSize": ev.BatchMaxMessages,
	"BatchWait": ev.BatchMaxWait, "Envelope": ev.Envelope, "HandlerMaxAttempts": ev.HandlerMaxAttempts,
	"HandlerBackoffMax": ev.HandlerBackoffMax, "RetryBackoffMax": ev.RetryBackoffMax, "ShutdownTimeout": ev.ShutdownTimeout,
	"Ordering": ev.Ordering, "MaxInFlight": ev.MaxInFlight,
	"MemoryBudget": ev.MemoryLimit,
}

// configError renames a *consumer.ConfigError after the variable.
func configError(err error) error {
	var ce *consumer.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	env, ok := configFields[ce.Field]
	if !ok {
		for e, r := range policyVars {
			if ce.Field == "Policies["+string(r)+"]" {
				env, ok = e, true
			}
		}
	}
	if !ok {
		return err
	}
	if ce.Field == "Table" {
		return &SettingError{Env: ev.TableSchema + ", " + env + " or " + ev.DedupScope, Problem: ce.Problem}
	}
	return &SettingError{Env: env, Problem: ce.Problem}
}

func buildTLS(v *values) (*tls.Config, error) {
	ca, cert, key := v.str(ev.TLSCAFile), v.str(ev.TLSCertFile), v.str(ev.TLSKeyFile)
	insecure := v.bool(ev.TLSInsecureSkipVerify)
	if !v.bool(ev.TLSEnabled) && ca == "" && cert == "" && key == "" && !insecure {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // opt-in, documented as development only
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, &SettingError{Env: ev.TLSCAFile, Problem: err.Error()}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &SettingError{Env: ev.TLSCAFile, Problem: "no PEM certificate found"}
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, &SettingError{Env: ev.TLSCertFile, Problem: "must be set together with " + ev.TLSKeyFile}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, &SettingError{Env: ev.TLSCertFile, Problem: err.Error()}
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
