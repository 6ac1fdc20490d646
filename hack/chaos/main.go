// Command chaos tries hard to break the project's promise: every valid event
// applied exactly once, nothing lost, no offset committed past an event that
// was not durably handled. It runs separate cmd/consumer processes (SQL sink
// writing a ledger) against the standalone broker (cmd/devbroker, persisted to
// a data dir) and a real PostgreSQL, and while a producer streams events with
// many duplicates, replays and malformed events (and a transactional producer
// commits and aborts transactions beside it), it kill -9s consumers at
// random moments, starts new ones (rebalances), restarts PostgreSQL and the
// broker, and runs partition maintenance concurrently on a fast clock.
//
// A second consumer group runs the http sink (an external handler) against a
// provider inside the harness that records every Idempotency-Key and sometimes
// drops the connection after applying a request, answers 409 to a retry whose
// key is still in progress and 429 with Retry-After; its processes are killed too,
// and a monitor samples pg_stat_activity for the longest consumer transaction.
//
// A third group, the claim clients (hack/chaos/claimclient), uses no Go
// runtime: a kafka-go reader and pgx call the dedup table's claim function
// per batch, as docs/any-language.md tells a service in another language to,
// and write a ledger of their own; they are killed too, every other time
// between a database commit and the offset commit.
//
// At the end it checks the invariants, prints what it found, and a final line
//
//	RESULT pooler=none events=... unique=... applied=... duplicates_applied=0 lost=0 aborted=... aborted_applied=0 kills=... dlq=...
//	  ... provider_missing=0 provider_requests_per_id_max=... http_dedup_rows_per_id_max=1
//	  provider_busy_409=... provider_429=... dead_lettered_retryable=0
//	  claim_kills=... claim_kills_after_commit=... claim_applied=... claim_lost=0
//	  claim_duplicates_applied=0 claim_offset_violations=0 max_tx_open_ms=...
//
// Then the replay phase (replay.go): a "bug" in the ledger dead-lettered a
// fraction of the ids during the run; it is fixed, and the dead letters are
// replayed by `consumer replay` processes kill -9ed at random moments until
// the replay completes, checked and printed as
//
//	RESULT replay dead_letters=... applied=... duplicates=... parked=... kills=... lost=0 duplicates_applied=0
//
// Then the outbox chain (outbox.go): producer services
// (hack/chaos/outboxproducer) write orders and their events in one
// transaction through the outbox, rolling some back on purpose, while they
// are kill -9ed; `consumer outbox-relay` replicas publish the outbox while
// they are kill -9ed; PostgreSQL and the broker restart once more; consumers
// of the outbox topic apply each event, and the topic and the applied rows
// are held against the business rows:
//
//	RESULT outbox_chaos committed=... published_distinct=... lost=0 order_violations=0 uncommitted_published=0 applied_twice=0 ...
//
// -outbox-only runs the outbox chain alone.
//
// It exits non-zero on any violation and prints the seed to replay the run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	o := DefaultOptions()
	flag.IntVar(&o.Events, "events", o.Events, "messages to produce (valid, duplicates, replays and malformed together)")
	flag.Float64Var(&o.DuplicateShare, "duplicates", o.DuplicateShare, "share of messages that repeat an earlier id")
	flag.IntVar(&o.Kills, "kills", o.Kills, "kill -9s of consumer processes")
	flag.IntVar(&o.PostgresRestarts, "pg-restarts", o.PostgresRestarts, "PostgreSQL crash-restarts")
	flag.IntVar(&o.BrokerRestarts, "broker-restarts", o.BrokerRestarts, "broker kill -9 and restarts")
	flag.IntVar(&o.Consumers, "consumers", o.Consumers, "consumer processes running normally")
	flag.IntVar(&o.HTTPConsumers, "http-consumers", o.HTTPConsumers, "http-sink consumer processes running normally (0: no HTTP group)")
	flag.IntVar(&o.HTTPKills, "http-kills", o.HTTPKills, "kill -9s of http-sink consumer processes")
	flag.DurationVar(&o.HTTPDelay, "http-delay", o.HTTPDelay, "the HTTP provider's time per call")
	flag.Float64Var(&o.HTTPDropShare, "http-drops", o.HTTPDropShare, "share of requests the provider applies and then drops the connection of")
	flag.Float64Var(&o.HTTPSlowShare, "http-slow", o.HTTPSlowShare, "share of requests that take -http-slow-delay, past the consumers' -http-timeout: their retry gets 409 while in progress")
	flag.DurationVar(&o.HTTPSlowDelay, "http-slow-delay", o.HTTPSlowDelay, "how long a slow request takes")
	flag.DurationVar(&o.HTTPTimeout, "http-timeout", o.HTTPTimeout, "the http consumers' request timeout (CONSUMER_SINK_HTTP_TIMEOUT)")
	flag.Float64Var(&o.HTTPRateShare, "http-429", o.HTTPRateShare, "share of requests answered 429 with Retry-After")
	flag.DurationVar(&o.HTTPRetryAfter, "http-retry-after", o.HTTPRetryAfter, "the Retry-After of the 429 answers (whole seconds)")
	flag.IntVar(&o.ClaimClients, "claim-clients", o.ClaimClients, "claim-function client processes (hack/chaos/claimclient) running normally (0: no claim group)")
	flag.IntVar(&o.ClaimKills, "claim-kills", o.ClaimKills, "kill -9s of claim clients (every other one between a database commit and its offset commit)")
	flag.IntVar(&o.Partitions, "partitions", o.Partitions, "topic partitions")
	flag.Float64Var(&o.TxnShare, "txn-share", o.TxnShare, "share of messages written by the transactional producer")
	flag.Float64Var(&o.AbortShare, "txn-aborts", o.AbortShare, "share of the transactions that are aborted")
	flag.StringVar(&o.Isolation, "isolation", "", "CONSUMER_ISOLATION for the consumers (empty: their default, ReadCommitted)")
	flag.BoolVar(&o.Pooler, "pooler", false, "run the consumers and the claim clients through PgBouncer in transaction mode (the pgbouncer binary, Debian's package)")
	flag.DurationVar(&o.ProduceFor, "produce-for", o.ProduceFor, "spread production (and the chaos) over this long")
	flag.IntVar(&o.BugBuckets, "bug-buckets", o.BugBuckets, "ids (of 256 buckets) the ledger rejects during the run and accepts after: dead-lettered, then replayed (0: no replay phase)")
	flag.IntVar(&o.BrokenBuckets, "broken-buckets", o.BrokenBuckets, "ids (of 256 buckets) the ledger rejects during the run and the replay too: parked")
	flag.IntVar(&o.ReplayKills, "replay-kills", o.ReplayKills, "kill -9s of the `consumer replay` process")
	flag.IntVar(&o.OutboxProducers, "outbox-producers", o.OutboxProducers, "outbox producer services (0: no outbox chain)")
	flag.IntVar(&o.OutboxRelays, "outbox-relays", o.OutboxRelays, "consumer outbox-relay replicas")
	flag.IntVar(&o.OutboxConsumers, "outbox-consumers", o.OutboxConsumers, "consumers of the outbox topic")
	flag.IntVar(&o.OutboxProducerKills, "outbox-producer-kills", o.OutboxProducerKills, "kill -9s of outbox producer services")
	flag.IntVar(&o.OutboxRelayKills, "outbox-relay-kills", o.OutboxRelayKills, "kill -9s of relays (every other one of the owner)")
	flag.IntVar(&o.OutboxConsumerKills, "outbox-consumer-kills", o.OutboxConsumerKills, "kill -9s of the outbox topic's consumers")
	flag.Float64Var(&o.OutboxRollbackShare, "outbox-rollbacks", o.OutboxRollbackShare, "share of the producers' transactions rolled back on purpose")
	flag.DurationVar(&o.OutboxFor, "outbox-for", o.OutboxFor, "how long the outbox chain produces (and its chaos runs)")
	outboxOnly := flag.Bool("outbox-only", false, "run the outbox chain alone")
	flag.Uint64Var(&o.Seed, "seed", 0, "random seed (0 = from the clock); printed for replays")
	flag.BoolVar(&o.Verbose, "v", false, "stream the consumers' and broker's logs")
	flag.BoolVar(&o.Keep, "keep", false, "keep the work directory (logs, broker data) after the run")
	flag.Parse()
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *outboxOnly {
		os.Exit(runOutboxOnly(ctx, o))
	}
	res, err := Run(ctx, o, os.Stderr)
	if res != nil {
		res.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v (seed %d)\n", err, o.Seed)
		os.Exit(1)
	}
	if v := res.Violations(); len(v) > 0 {
		for _, s := range v {
			fmt.Fprintln(os.Stderr, "chaos: VIOLATION:", s)
		}
		fmt.Fprintf(os.Stderr, "chaos: replay with -seed %d\n", o.Seed)
		os.Exit(1)
	}
}

// runOutboxOnly runs the outbox chain alone and returns the exit code.
func runOutboxOnly(ctx context.Context, o Options) int {
	if o.OutboxProducers <= 0 {
		fmt.Fprintln(os.Stderr, "chaos: -outbox-only needs -outbox-producers > 0")
		return 2
	}
	res, err := RunOutbox(ctx, o, os.Stderr)
	if res != nil {
		res.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v (seed %d)\n", err, o.Seed)
		return 1
	}
	if v := res.Violations(); len(v) > 0 {
		for _, s := range v {
			fmt.Fprintln(os.Stderr, "chaos: VIOLATION:", s)
		}
		fmt.Fprintf(os.Stderr, "chaos: replay with -seed %d\n", o.Seed)
		return 1
	}
	return 0
}
