// Package envvars names the environment variables the ready-made consumer
// (cmd/consumer) reads. The operator imports it to build the consumer
// Deployment, so the two can't drift apart. It imports nothing.
//
// Every variable has a command-line flag of the same meaning: the name without
// the CONSUMER_ prefix, lower case, '_' replaced by '-' (CONSUMER_BATCH_MAX_WAIT
// is --batch-max-wait). Flags win over the environment. docs/consumer.md
// documents each one.
package envvars

// Kafka.
const (
	Brokers                = "CONSUMER_BROKERS"           // comma-separated host:port list (required)
	Topic                  = "CONSUMER_TOPIC"             // topic to consume (required)
	Group                  = "CONSUMER_GROUP"             // consumer group id (required); also the dedup key's group
	ClientID               = "CONSUMER_CLIENT_ID"         // Kafka client id; default "idempotent-consumer"
	DeadLetterTopic        = "CONSUMER_DEAD_LETTER_TOPIC" // default "<topic>.dlq"
	StartOffset            = "CONSUMER_START_OFFSET"      // earliest (default) or latest, for a group without offsets
	Isolation              = "CONSUMER_ISOLATION"         // ReadCommitted (default) or ReadUncommitted
	SessionTimeout         = "CONSUMER_SESSION_TIMEOUT"   // Go duration; default 10s
	HeartbeatInterval      = "CONSUMER_HEARTBEAT_INTERVAL"
	RebalanceTimeout       = "CONSUMER_REBALANCE_TIMEOUT"
	TLSEnabled             = "CONSUMER_TLS_ENABLED" // true to use TLS (implied by the other TLS settings)
	TLSCAFile              = "CONSUMER_TLS_CA_FILE"
	TLSCertFile            = "CONSUMER_TLS_CERT_FILE"
	TLSKeyFile             = "CONSUMER_TLS_KEY_FILE"
	TLSInsecureSkipVerify  = "CONSUMER_TLS_INSECURE_SKIP_VERIFY"
	SASLMechanism          = "CONSUMER_SASL_MECHANISM" // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	SASLUsername           = "CONSUMER_SASL_USERNAME"
	SASLPassword           = "CONSUMER_SASL_PASSWORD" //nolint:gosec // G101: the variable's name (a secret's), not a credential
	DatabaseURL            = "CONSUMER_DATABASE_URL"  // secret; postgres:// URL or key=value DSN (required)
	DatabaseURLFallback    = "DATABASE_URL"           // read when CONSUMER_DATABASE_URL is unset
	DatabaseMaxConns       = "CONSUMER_DATABASE_MAX_CONNS"
	DatabasePooler         = "CONSUMER_DATABASE_POOLER" // "" (a server, or a session pooler) or transaction (PgBouncer transaction mode)
	TableSchema            = "CONSUMER_TABLE_SCHEMA"    // default "public"
	TableName              = "CONSUMER_TABLE_NAME"      // default "processed_event"
	DedupScope             = "CONSUMER_DEDUP_SCOPE"     // ConsumerGroup (default) or Global
	BatchMaxMessages       = "CONSUMER_BATCH_MAX_MESSAGES"
	BatchMaxWait           = "CONSUMER_BATCH_MAX_WAIT"
	MaxEventBytes          = "CONSUMER_MAX_EVENT_BYTES"
	Envelope               = "CONSUMER_ENVELOPE" // json (default), cloudevents or auto
	IDField                = "CONSUMER_ID_FIELD"
	TypeField              = "CONSUMER_TYPE_FIELD"
	TimeField              = "CONSUMER_TIME_FIELD"
	PayloadField           = "CONSUMER_PAYLOAD_FIELD"
	HandlerMaxAttempts     = "CONSUMER_HANDLER_MAX_ATTEMPTS"
	HandlerBackoffInitial  = "CONSUMER_HANDLER_BACKOFF_INITIAL"
	HandlerBackoffMax      = "CONSUMER_HANDLER_BACKOFF_MAX"
	RetryBackoffMax        = "CONSUMER_RETRY_BACKOFF_MAX" // cap of the pause after a database/broker failure
	RetryLaterMax          = "CONSUMER_RETRY_LATER_MAX"   // http sink: the most one event pauses on Retry-After/409/425/429
	ShutdownTimeout        = "CONSUMER_SHUTDOWN_TIMEOUT"
	Ordering               = "CONSUMER_ORDERING"        // Key (default for the http sink), Partition or Unordered
	MaxInFlight            = "CONSUMER_MAX_IN_FLIGHT"   // http sink: most requests in flight; default 64
	PolicyNotJSON          = "CONSUMER_POLICY_NOT_JSON" // DeadLetter (default), Skip or Stop
	PolicyMissingID        = "CONSUMER_POLICY_MISSING_ID"
	PolicyInvalidUUID      = "CONSUMER_POLICY_INVALID_UUID"
	PolicyWrongUUIDVersion = "CONSUMER_POLICY_WRONG_UUID_VERSION"
	PolicyOversized        = "CONSUMER_POLICY_OVERSIZED"
	PolicyOutsideWindow    = "CONSUMER_POLICY_OUTSIDE_WINDOW" // also Process (handle without dedup)
	PolicyHandlerFailed    = "CONSUMER_POLICY_HANDLER_FAILED"
	ListenAddr             = "CONSUMER_LISTEN_ADDR"  // /healthz /readyz /metrics; default ":8080"
	LogLevel               = "CONSUMER_LOG_LEVEL"    // debug, info (default), warn, error
	LogFormat              = "CONSUMER_LOG_FORMAT"   // json (default) or text
	MemoryLimit            = "CONSUMER_MEMORY_LIMIT" // bytes: the container's memory limit (downward API)
	Sink                   = "CONSUMER_SINK"         // http, sql, log or none (required)
	SinkHTTPURL            = "CONSUMER_SINK_HTTP_URL"
	SinkHTTPTimeout        = "CONSUMER_SINK_HTTP_TIMEOUT"
	SinkHTTPAuthorization  = "CONSUMER_SINK_HTTP_AUTHORIZATION"      // secret; sent as the Authorization header
	SinkHTTPRetryable      = "CONSUMER_SINK_HTTP_RETRYABLE_STATUSES" // default "408,409,425,429,500-599"
	SinkHTTPIdempotencyKey = "CONSUMER_SINK_HTTP_IDEMPOTENCY_KEY"    // template; default "{eventId}"
	SinkSQLStatement       = "CONSUMER_SINK_SQL_STATEMENT"           // run once per new event in the dedup transaction
)

// The outbox relay (`consumer outbox-relay`, docs/outbox.md) reads
// Brokers, DatabaseURL (or DatabaseURLFallback) and ListenAddr, and these.
const (
	OutboxSchema          = "CONSUMER_OUTBOX_SCHEMA"            // default "public"
	OutboxTable           = "CONSUMER_OUTBOX_TABLE"             // default "outbox"
	OutboxOwner           = "CONSUMER_OUTBOX_OWNER"             // set: the relay creates the table (Ensure) and keeps its partitions
	OutboxInterval        = "CONSUMER_OUTBOX_INTERVAL"          // partition interval when it creates the table; default Daily
	OutboxPremake         = "CONSUMER_OUTBOX_PREMAKE"           // default 4
	OutboxRetention       = "CONSUMER_OUTBOX_RETENTION"         // Go duration; default 168h
	OutboxPollInterval    = "CONSUMER_OUTBOX_POLL_INTERVAL"     // default 1s
	OutboxBatchSize       = "CONSUMER_OUTBOX_BATCH_SIZE"        // default 2000
	OutboxMaxMessageBytes = "CONSUMER_OUTBOX_MAX_MESSAGE_BYTES" // default 1048576
	OutboxPublishTimeout  = "CONSUMER_OUTBOX_PUBLISH_TIMEOUT"   // default 5s
)

// Outbox lists the outbox relay's own variables.
var Outbox = []string{OutboxSchema, OutboxTable, OutboxOwner, OutboxInterval, OutboxPremake, OutboxRetention,
	OutboxPollInterval, OutboxBatchSize, OutboxMaxMessageBytes, OutboxPublishTimeout}

// Secrets are the variables whose values are credentials: the operator sets
// them from Secret references (valueFrom.secretKeyRef), and the consumer never
// logs them.
var Secrets = []string{DatabaseURL, DatabaseURLFallback, SASLPassword, SinkHTTPAuthorization}

// All lists every variable the consumer reads, in documentation order.
var All = []string{
	Brokers, Topic, Group, ClientID, DeadLetterTopic, StartOffset, Isolation,
	SessionTimeout, HeartbeatInterval, RebalanceTimeout,
	TLSEnabled, TLSCAFile, TLSCertFile, TLSKeyFile, TLSInsecureSkipVerify,
	SASLMechanism, SASLUsername, SASLPassword,
	DatabaseURL, DatabaseURLFallback, DatabaseMaxConns, DatabasePooler, TableSchema, TableName, DedupScope,
	BatchMaxMessages, BatchMaxWait, MaxEventBytes,
	Envelope, IDField, TypeField, TimeField, PayloadField,
	HandlerMaxAttempts, HandlerBackoffInitial, HandlerBackoffMax, RetryBackoffMax, RetryLaterMax, ShutdownTimeout,
	Ordering, MaxInFlight,
	PolicyNotJSON, PolicyMissingID, PolicyInvalidUUID, PolicyWrongUUIDVersion, PolicyOversized,
	PolicyOutsideWindow, PolicyHandlerFailed,
	ListenAddr, LogLevel, LogFormat, MemoryLimit,
	Sink, SinkHTTPURL, SinkHTTPTimeout, SinkHTTPAuthorization, SinkHTTPRetryable, SinkHTTPIdempotencyKey, SinkSQLStatement,
}
