package consumer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envelope"
	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/internal/deadletter"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
)

// SASL mechanisms.
const (
	SASLPlain       = broker.SASLPlain
	SASLScramSHA256 = broker.SASLScramSHA256
	SASLScramSHA512 = broker.SASLScramSHA512
)

// SASL configures SASL authentication to the brokers. Password is never logged.
type SASL struct {
	Mechanism string // "" (none), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Username  string
	Password  string
}

// LogValue keeps the password out of structured logs.
func (s SASL) LogValue() slog.Value {
	return slog.GroupValue(slog.String("mechanism", s.Mechanism), slog.String("username", s.Username))
}

// Envelope is where the event id (and type, time, payload) are read from.
type Envelope = envelope.Options

// Envelope modes.
const (
	EnvelopeJSON        = envelope.ModeJSON
	EnvelopeCloudEvents = envelope.ModeCloudEvents
	EnvelopeAuto        = envelope.ModeAuto
)

// Start offsets for a group without committed offsets.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// Defaults.
const (
	DefaultBatchSize          = 500
	DefaultBatchWait          = 200 * time.Millisecond
	DefaultHandlerMaxAttempts = 5
	DefaultHandlerBackoff     = 100 * time.Millisecond
	DefaultHandlerBackoffMax  = 2 * time.Second
	DefaultRetryBackoff       = 200 * time.Millisecond
	DefaultRetryBackoffMax    = 30 * time.Second
	DefaultSessionTimeout     = 10 * time.Second
	// DefaultHeartbeatInterval is short because a member learns of a
	// rebalance only from a heartbeat's answer: every partition of the
	// group stops until the last member has heard of it, so a rolling
	// restart (two rebalances per replica) stalled events for up to 6 s
	// at 3 s (RESULT rollout in make bench; 0.6 s at 500 ms). A heartbeat
	// is a few bytes.
	DefaultHeartbeatInterval = 500 * time.Millisecond
	DefaultRebalanceTimeout  = 30 * time.Second
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultClientID          = "idempotent-consumer"
	DeadLetterSuffix         = ".dlq"
	// DefaultDeadLetterMaxBytes is Kafka's default max.message.bytes, assumed
	// for the dead-letter topic while its own limit can't be read.
	DefaultDeadLetterMaxBytes = deadletter.DefaultMaxBytes
)

// Pooler is Config.DatabasePooler.
type Pooler string

// The poolers.
const (
	PoolerNone        Pooler = ""
	PoolerTransaction Pooler = "transaction"
)

// Config configures a Consumer. New validates it once; the zero value of an
// optional field means its default.
type Config struct {
	// Brokers to bootstrap from, host:port. Required.
	Brokers []string
	// Topic to consume. Required.
	Topic string
	// Group is the Kafka consumer group id. Required. With dedup scope
	// ConsumerGroup it is also part of the dedup key.
	Group string
	// ClientID sent to the brokers; default "idempotent-consumer".
	ClientID string
	// TLS, when not nil, is used for every broker connection.
	TLS *tls.Config
	// SASL authentication; Mechanism "" means none.
	SASL SASL
	// StartOffset is where a group without committed offsets starts:
	// StartEarliest (default) or StartLatest.
	StartOffset string
	// Isolation is IsolationReadCommitted (default: records of aborted
	// transactions are skipped) or IsolationReadUncommitted.
	Isolation Isolation
	// SessionTimeout, HeartbeatInterval and RebalanceTimeout of the group
	// membership; defaults 10s, 500ms (at most a third of SessionTimeout), 30s.
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	RebalanceTimeout  time.Duration

	// DatabaseURL is the PostgreSQL connection string. Required unless Pool
	// is set. Never logged.
	DatabaseURL string
	// Pool, when set, is used instead of DatabaseURL; the caller closes it.
	Pool *pgxpool.Pool
	// DatabaseMaxConns caps the pool opened from DatabaseURL; default one per
	// assigned partition is useful, so the default is 8.
	DatabaseMaxConns int32
	// Table is the dedup table (created and maintained by the operator or by
	// dedup.Engine). Defaults: public.processed_event, scope ConsumerGroup.
	Table dedup.Table

	// BatchSize is the most events per partition per transaction; default 500.
	BatchSize int
	// BatchWait is the longest a batch waits to fill after its first event
	// while events keep arriving (a batch closes as soon as none follows
	// within 2ms, so a lone event is not delayed); default 200ms.
	BatchWait time.Duration

	// MemoryBudget bounds, in bytes, the records the process holds across all
	// its partitions: the readers' prefetch queues and the batches (see
	// docs/consumer.md, "Memory budget"). 0 means unbounded (100 records
	// prefetched and up to 16 MiB per batch, per partition). A budget set from
	// a container's memory limit should leave room for the rest of the heap
	// and the garbage collector: the ready-made consumer uses half the limit.
	MemoryBudget int64

	// Envelope says where the event id is; default the JSON "eventId" field,
	// values up to 1 MiB.
	Envelope Envelope

	// HandlerMaxAttempts is how often a failing handler is called for one
	// event before the event gets ReasonHandlerFailed; default 5.
	HandlerMaxAttempts int
	// HandlerBackoff and HandlerBackoffMax bound the exponential pause between
	// handler attempts; defaults 100ms and 2s. A transactional handler's
	// pause is taken with no transaction open: the batch's transaction is
	// rolled back, the events before the failed one commit, and the failed
	// event is tried again in a new transaction after the pause, its attempts
	// counted across them. HandlerBackoffMax must be shorter than
	// ShutdownTimeout, within which a shutdown waits a pause out.
	HandlerBackoff    time.Duration
	HandlerBackoffMax time.Duration
	// RetryBackoffMax caps the pause between attempts after a database or
	// broker failure (those are retried without limit, never dead-lettered);
	// default 30s.
	RetryBackoffMax time.Duration
	// RetryLaterMax bounds the pauses of one event whose external handler
	// asked to be called again later (RetryLater: an HTTP 429 or 503 with
	// Retry-After, a 409 or 425 while its key is being processed). They use
	// no attempt; past this total the answers count as failed attempts.
	// Default 1m; negative: no such pause (every answer uses an attempt).
	RetryLaterMax time.Duration

	// DeadLetterTopic receives dead-lettered events; default Topic+".dlq".
	// It must exist.
	DeadLetterTopic string
	// Policies maps a reason to its policy; unlisted reasons dead-letter.
	Policies map[Reason]Policy

	// ShutdownTimeout bounds how long Run waits, once its context is done,
	// for in-flight batches to finish and commit; default 30s.
	ShutdownTimeout time.Duration

	// Ordering says which records of a partition may be handled at the same
	// time (external handlers only): OrderingKey (their default),
	// OrderingPartition or OrderingUnordered. Transactional handlers accept
	// only OrderingPartition, which is theirs.
	Ordering Ordering
	// MaxInFlight bounds the external handler calls running at once across
	// all partitions of the process; default 64. Transactional handlers
	// ignore it.
	MaxInFlight int
	// DatabasePooler says what stands between the runtime and PostgreSQL:
	// PoolerNone (a server, or a pooler in session mode) or
	// PoolerTransaction (PgBouncer's pool_mode=transaction, CloudNativePG's
	// Pooler in transaction mode), where a server session serves one
	// transaction at a time: the runtime then sends no startup parameter but
	// application_name, and every statement unnamed (no
	// prepared statement outlives a transaction there). Only for a pool
	// opened from DatabaseURL. docs/database-secrets.md, Poolers.
	DatabasePooler Pooler
	// IdleInTransactionTimeout is set as idle_in_transaction_session_timeout
	// on the sessions of the pool the runtime opens from DatabaseURL, so that
	// no transaction stays open while it waits on anything but PostgreSQL;
	// default 5s, a negative value leaves the server's setting. A Pool given
	// by the caller is theirs and is left alone.
	IdleInTransactionTimeout time.Duration

	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the Prometheus collectors; default a fresh
	// registry, served by Consumer.Handler at /metrics.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics when Registerer is set; default
	// prometheus.DefaultGatherer if Registerer is prometheus.DefaultRegisterer.
	Gatherer prometheus.Gatherer
	// TracerProvider starts the spans of batches and handler calls
	// (internal/telemetry); default the global provider (otel.GetTracerProvider),
	// which does nothing unless one was set. Under a provider that does
	// nothing the runtime only passes each record's traceparent on.
	TracerProvider trace.TracerProvider
}

// ConfigError names the setting that is wrong.
type ConfigError struct {
	Field   string // the Config field, e.g. "Brokers" or "Policies[outside_window]"
	Problem string
}

func (e *ConfigError) Error() string { return "consumer config: " + e.Field + ": " + e.Problem }

func cfgErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// withDefaults returns c with defaults applied.
func (c Config) withDefaults() Config {
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.StartOffset == "" {
		c.StartOffset = StartEarliest
	}
	if c.Isolation == "" {
		c.Isolation = IsolationReadCommitted
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = min(DefaultHeartbeatInterval, c.SessionTimeout/3)
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.DatabaseMaxConns == 0 {
		c.DatabaseMaxConns = 8
	}
	c.Table = c.Table.WithDefaults()
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchWait == 0 {
		c.BatchWait = DefaultBatchWait
	}
	c.Envelope = c.Envelope.WithDefaults()
	if c.HandlerMaxAttempts == 0 {
		c.HandlerMaxAttempts = DefaultHandlerMaxAttempts
	}
	if c.HandlerBackoff == 0 {
		c.HandlerBackoff = DefaultHandlerBackoff
	}
	if c.HandlerBackoffMax == 0 {
		c.HandlerBackoffMax = DefaultHandlerBackoffMax
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = DefaultRetryBackoffMax
	}
	if c.RetryLaterMax == 0 {
		c.RetryLaterMax = DefaultRetryLaterMax
	}
	if c.DeadLetterTopic == "" && c.Topic != "" {
		c.DeadLetterTopic = c.Topic + DeadLetterSuffix
	}
	policies := make(map[Reason]Policy, len(Reasons))
	for _, r := range Reasons {
		policies[r] = PolicyDeadLetter
	}
	for r, p := range c.Policies {
		policies[r] = p
	}
	c.Policies = policies
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.IdleInTransactionTimeout == 0 {
		c.IdleInTransactionTimeout = DefaultIdleInTransactionTimeout
	}
	return c
}

// Validate reports the first setting that can never work, as a *ConfigError.
// It sends nothing over the network.
func (c Config) Validate() error {
	c = c.withDefaults()
	if len(c.Brokers) == 0 {
		return cfgErr("Brokers", "must not be empty")
	}
	for _, b := range c.Brokers {
		if b == "" || !strings.Contains(b, ":") || strings.ContainsAny(b, " /,") {
			return cfgErr("Brokers", "%q is not host:port", b)
		}
	}
	if err := validTopic(c.Topic); err != nil {
		return cfgErr("Topic", "%v", err)
	}
	if c.Group == "" {
		return cfgErr("Group", "must not be empty")
	}
	if len(c.Group) > 255 {
		return cfgErr("Group", "is %d bytes, at most 255", len(c.Group))
	}
	if err := validTopic(c.DeadLetterTopic); err != nil {
		return cfgErr("DeadLetterTopic", "%v", err)
	}
	if c.DeadLetterTopic == c.Topic {
		return cfgErr("DeadLetterTopic", "must differ from Topic %q", c.Topic)
	}
	switch c.StartOffset {
	case StartEarliest, StartLatest:
	default:
		return cfgErr("StartOffset", "%q is not %q or %q", c.StartOffset, StartEarliest, StartLatest)
	}
	switch c.Isolation {
	case IsolationReadCommitted, IsolationReadUncommitted:
	default:
		return cfgErr("Isolation", "%q is not %s or %s", c.Isolation, IsolationReadCommitted, IsolationReadUncommitted)
	}
	if c.SessionTimeout < 100*time.Millisecond {
		return cfgErr("SessionTimeout", "%v is below 100ms", c.SessionTimeout)
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.SessionTimeout {
		return cfgErr("HeartbeatInterval", "%v must be positive and below SessionTimeout %v", c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.RebalanceTimeout <= 0 {
		return cfgErr("RebalanceTimeout", "must be positive")
	}
	switch c.SASL.Mechanism {
	case "":
		if c.SASL.Username != "" || c.SASL.Password != "" {
			return cfgErr("SASL.Mechanism", "is empty but a username or password is set")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASL.Username == "" {
			return cfgErr("SASL.Username", "must not be empty with mechanism %s", c.SASL.Mechanism)
		}
		if c.SASL.Password == "" {
			return cfgErr("SASL.Password", "must not be empty with mechanism %s", c.SASL.Mechanism)
		}
	default:
		return cfgErr("SASL.Mechanism", "%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASL.Mechanism)
	}
	if c.Pool == nil && c.DatabaseURL == "" {
		return cfgErr("DatabaseURL", "must not be empty")
	}
	if c.Pool == nil {
		if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
			// pgx's parse errors can quote the whole string, password included.
			return cfgErr("DatabaseURL", "cannot be parsed (%s)", redact.Text(redact.ErrorText(err), append(redact.DSNSecrets(c.DatabaseURL), c.DatabaseURL)...))
		}
	}
	if c.DatabaseMaxConns < 1 {
		return cfgErr("DatabaseMaxConns", "must be at least 1")
	}
	if c.DatabasePooler != PoolerNone && c.DatabasePooler != PoolerTransaction {
		return cfgErr("DatabasePooler", "%q is not empty or %q", c.DatabasePooler, PoolerTransaction)
	}
	if err := c.Table.Validate(); err != nil {
		return cfgErr("Table", "%v", err)
	}
	if c.BatchSize < 1 || c.BatchSize > 100000 {
		return cfgErr("BatchSize", "%d is not between 1 and 100000", c.BatchSize)
	}
	if c.BatchWait < 0 || c.BatchWait > time.Minute {
		return cfgErr("BatchWait", "%v is not between 0 and 1m", c.BatchWait)
	}
	if c.MemoryBudget < 0 {
		return cfgErr("MemoryBudget", "%d must not be negative (0: unbounded)", c.MemoryBudget)
	}
	if err := c.Envelope.Validate(); err != nil {
		return cfgErr("Envelope", "%v", err)
	}
	if c.HandlerMaxAttempts < 1 || c.HandlerMaxAttempts > 100 {
		return cfgErr("HandlerMaxAttempts", "%d is not between 1 and 100", c.HandlerMaxAttempts)
	}
	if c.HandlerBackoff < 0 || c.HandlerBackoffMax < c.HandlerBackoff {
		return cfgErr("HandlerBackoffMax", "%v must be at least HandlerBackoff %v", c.HandlerBackoffMax, c.HandlerBackoff)
	}
	if c.RetryBackoffMax < DefaultRetryBackoff {
		return cfgErr("RetryBackoffMax", "%v is below %v", c.RetryBackoffMax, DefaultRetryBackoff)
	}
	if c.RetryLaterMax > 24*time.Hour {
		return cfgErr("RetryLaterMax", "%v is above 24h", c.RetryLaterMax)
	}
	for r, p := range c.Policies {
		field := "Policies[" + string(r) + "]"
		if !knownReason(r) {
			return cfgErr(field, "unknown reason")
		}
		switch p {
		case PolicyDeadLetter, PolicySkip, PolicyStop:
		case PolicyProcess:
			if r != ReasonOutsideWindow {
				return cfgErr(field, "Process is only allowed for %s", ReasonOutsideWindow)
			}
		default:
			return cfgErr(field, "%q is not DeadLetter, Skip, Stop or Process", p)
		}
	}
	if c.ShutdownTimeout < 0 {
		return cfgErr("ShutdownTimeout", "must not be negative")
	}
	if c.HandlerBackoffMax >= c.ShutdownTimeout {
		// The pauses between attempts are taken with no transaction open
		// (internal/txpipe); at shutdown a batch waits out its pause and finishes
		// within ShutdownTimeout. A longer pause can never fit.
		return cfgErr("HandlerBackoffMax", "%v must be shorter than ShutdownTimeout %v: a pause between a handler's attempts must fit in the shutdown grace period, in which the batch in flight waits it out and finishes (else it is abandoned and its event starts its attempts over at the next start)",
			c.HandlerBackoffMax, c.ShutdownTimeout)
	}
	if c.Gatherer != nil && c.Registerer == nil {
		return cfgErr("Gatherer", "set without Registerer")
	}
	return c.validateConcurrency()
}

func knownReason(r Reason) bool {
	for _, k := range Reasons {
		if k == r {
			return true
		}
	}
	return false
}

// validTopic applies Kafka's topic name rules.
func validTopic(t string) error {
	if t == "" {
		return errors.New("must not be empty")
	}
	if len(t) > 249 {
		return fmt.Errorf("%q is longer than 249 bytes", t)
	}
	if t == "." || t == ".." {
		return fmt.Errorf("%q is not a topic name", t)
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q has a character other than [a-zA-Z0-9._-]", t)
		}
	}
	return nil
}

// LogValue describes the configuration without secrets.
func (c Config) LogValue() slog.Value {
	c = c.withDefaults()
	return slog.GroupValue(
		slog.Any("brokers", c.Brokers),
		slog.String("topic", c.Topic),
		slog.String("group", c.Group),
		slog.String("deadLetterTopic", c.DeadLetterTopic),
		slog.String("isolation", string(c.Isolation)),
		slog.Bool("tls", c.TLS != nil),
		slog.Any("sasl", c.SASL),
		slog.String("database", redact.DSN(c.DatabaseURL)),
		slog.String("table", c.Table.String()),
		slog.String("scope", string(c.Table.Scope)),
		slog.Int("batchSize", c.BatchSize),
		slog.Duration("batchWait", c.BatchWait),
		slog.Int64("memoryBudget", c.MemoryBudget),
		slog.String("envelope", string(c.Envelope.Mode)),
		slog.Int("handlerMaxAttempts", c.HandlerMaxAttempts),
		slog.Any("policies", c.Policies),
		slog.String("ordering", string(c.Ordering)),
		slog.Int("maxInFlight", c.MaxInFlight),
	)
}
