package main

import "time"

// Options configure a chaos run.
type Options struct {
	Events           int
	DuplicateShare   float64
	MalformedShare   float64
	Kills            int
	PostgresRestarts int
	BrokerRestarts   int
	Consumers        int
	Partitions       int
	// TxnShare of Events are written by a transactional producer, in
	// transactions of which AbortShare are aborted.
	TxnShare   float64
	AbortShare float64
	// HTTPConsumers run in a second group with the http sink (an external
	// handler) against a provider inside the harness; HTTPKills of them are
	// kill -9ed. The provider takes HTTPDelay per call and drops the
	// connection after applying HTTPDropShare of the requests.
	HTTPConsumers int
	HTTPKills     int
	HTTPDelay     time.Duration
	HTTPDropShare float64
	// HTTPSlowShare of the requests take HTTPSlowDelay, longer than the
	// consumers' request timeout (HTTPTimeout): their retry gets 409 while
	// the first is still in progress. HTTPRateShare are answered 429 with
	// Retry-After HTTPRetryAfter.
	HTTPSlowShare  float64
	HTTPSlowDelay  time.Duration
	HTTPTimeout    time.Duration
	HTTPRateShare  float64
	HTTPRetryAfter time.Duration
	// ClaimClients run in a third group: hack/chaos/claimclient, a client
	// that dedups through the claim function as docs/any-language.md tells
	// another language to (kafka-go, pgx without named statements), writing
	// its own ledger (claim_ledger). ClaimKills of them are kill -9ed, every
	// other one between a database commit and its offset commit.
	ClaimClients int
	ClaimKills   int
	// Isolation, when set, is the consumers' CONSUMER_ISOLATION.
	Isolation string
	// Pooler puts a PgBouncer in transaction pooling mode between the
	// consumer groups (and the claim clients) and PostgreSQL
	// (CONSUMER_DATABASE_POOLER=transaction);
	// the harness's own checks connect directly.
	Pooler     bool
	ProduceFor time.Duration
	// ClockSpeed is how much faster than real time the partition maintenance
	// and the event ids' timestamps run: with Hourly partitions and 600x, a new
	// partition every 6 real seconds.
	ClockSpeed float64
	Premake    int
	Retention  time.Duration // in simulated time
	// The replay phase. A "bug" in the ledger (a CHECK constraint) rejects
	// the ids whose bucket (their 15th byte, random in a UUID v7) is below
	// BugBuckets of 256, and BrokenBuckets more after them, so the consumers
	// dead-letter them (handler_failed). After the live run the bug is fixed
	// for the first kind only, and a `consumer replay` process applies the
	// dead letters while it is kill -9ed ReplayKills times; the still-broken
	// ones are parked (maxReplays 1). BugBuckets 0: no bug, no replay phase.
	BugBuckets    int
	BrokenBuckets int
	ReplayKills   int
	// The outbox chain (outbox.go): OutboxProducers producer services
	// (hack/chaos/outboxproducer) writing orders and their events in one
	// transaction on OutboxKeys keys, rolling back OutboxRollbackShare of
	// the transactions and pausing up to OutboxPauseMax between them;
	// OutboxRelays `consumer outbox-relay` replicas; OutboxConsumers
	// consumers of the outbox topic (OutboxPartitions partitions). Over
	// OutboxFor, the kills of each kind, one PostgreSQL and one broker
	// restart. 0 producers: no outbox chain.
	OutboxProducers, OutboxRelays, OutboxConsumers             int
	OutboxProducerKills, OutboxRelayKills, OutboxConsumerKills int
	OutboxKeys, OutboxPartitions                               int
	OutboxRollbackShare                                        float64
	OutboxPauseMax, OutboxFor                                  time.Duration
	Seed                                                       uint64
	Verbose                                                    bool
	// Keep leaves the work directory (the processes' logs, the broker's
	// data) in place for a diagnosis.
	Keep bool
	Root string
}

// DefaultOptions is the `make chaos` run.
func DefaultOptions() Options {
	return Options{
		Events:           100_000,
		DuplicateShare:   0.25,
		MalformedShare:   0.005,
		Kills:            24,
		PostgresRestarts: 1,
		BrokerRestarts:   1,
		Consumers:        3,
		Partitions:       6,
		TxnShare:         0.1,
		AbortShare:       1.0 / 3,
		HTTPConsumers:    2,
		HTTPKills:        12,
		HTTPDelay:        3 * time.Millisecond,
		HTTPDropShare:    0.02,
		HTTPSlowShare:    0.003,
		HTTPSlowDelay:    2500 * time.Millisecond,
		HTTPTimeout:      time.Second,
		HTTPRateShare:    0.005,
		HTTPRetryAfter:   2 * time.Second,
		ClaimClients:     2,
		ClaimKills:       8,
		ProduceFor:       90 * time.Second,
		ClockSpeed:       600,
		Premake:          24,
		Retention:        72 * time.Hour,
		BugBuckets:       5, // ~2% of the ids
		BrokenBuckets:    1, // ~0.4% stay broken and are parked
		ReplayKills:      5,

		OutboxProducers:     3,
		OutboxRelays:        3,
		OutboxConsumers:     2,
		OutboxProducerKills: 12,
		OutboxRelayKills:    24,
		OutboxConsumerKills: 6,
		OutboxKeys:          50,
		OutboxPartitions:    6,
		OutboxRollbackShare: 0.15,
		OutboxPauseMax:      20 * time.Millisecond,
		OutboxFor:           60 * time.Second,
	}
}

// ShortOptions is the variant inside `make test`: the same invariants, a
// smaller run.
func ShortOptions() Options {
	o := DefaultOptions()
	o.Events = 12_000
	o.Kills = 5
	o.Consumers = 2
	o.HTTPKills = 3
	o.ClaimKills = 4
	o.Partitions = 4
	o.ProduceFor = 25 * time.Second
	o.ReplayKills = 3
	// The outbox chain runs in a test of its own (TestOutboxChaosShort).
	o.OutboxProducers = 0
	return o
}

// OutboxShortOptions is the outbox chain's variant inside `make test`: the
// chain alone, at least 2 relays and 10 relay kills as `make chaos`.
func OutboxShortOptions() Options {
	o := DefaultOptions()
	o.OutboxProducers = 2
	o.OutboxRelays = 2
	o.OutboxConsumers = 2
	o.OutboxProducerKills = 6
	o.OutboxRelayKills = 10
	o.OutboxConsumerKills = 2
	o.OutboxKeys = 30
	o.OutboxPartitions = 4
	o.OutboxFor = 20 * time.Second
	return o
}

const (
	topic    = "chaos.events"
	dlqTopic = "chaos.events.dlq"
	group    = "chaos"
	// The HTTP consumers' group, with a dead-letter topic of its own. The
	// dedup table is scoped by consumer group, so both groups share it.
	httpGroup    = "chaos-http"
	httpDLQTopic = "chaos.events.http.dlq"
	// The claim clients' group (and their sessions' application_name).
	claimGroup = "chaos-claim"
	// application_names of the two fleets' sessions (CONSUMER_CLIENT_ID).
	sqlApp  = "chaos-sql"
	httpApp = "chaos-http"
	// The ledger has no unique constraint: a double application shows up as
	// two rows rather than being hidden by an error.
	ledgerDDL = `CREATE TABLE ledger (
		id       bigserial PRIMARY KEY,
		event_id uuid NOT NULL,
		amount   bigint NOT NULL
	)`
)

// claimLedgerDDL is the claim clients' ledger: no unique constraint either,
// and none of the bug's CHECK constraints (they are the SQL group's).
const claimLedgerDDL = `CREATE TABLE claim_ledger (
	id       bigserial PRIMARY KEY,
	event_id uuid NOT NULL,
	amount   bigint NOT NULL
)`

// ledgerStatement is the SQL sink's statement: $1 is the event id, $2 the
// payload (see docs/consumer.md).
const ledgerStatement = `INSERT INTO ledger (event_id, amount) VALUES ($1, ($2::jsonb->'payload'->>'amount')::bigint)`

// outsideWindowReason is the dead-letter reason of an id older than the
// dedup window.
const outsideWindowReason = "outside_window"

// simClock runs ClockSpeed times faster than real time from a start instant.
type simClock struct {
	start time.Time
	real  time.Time
	speed float64
}

func (c simClock) now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.real)) * c.speed))
}
