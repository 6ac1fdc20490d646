package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envelope"
	ev "github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/consumer/sink"
)

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
	c.DatabaseMaxConns = v.int32(ev.DatabaseMaxConns)
	c.DatabasePooler = consumer.Pooler(strings.ToLower(v.str(ev.DatabasePooler)))
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
	"DatabaseMaxConns": ev.DatabaseMaxConns, "DatabasePooler": ev.DatabasePooler, "Table": ev.TableName, "BatchSize": ev.BatchMaxMessages,
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
