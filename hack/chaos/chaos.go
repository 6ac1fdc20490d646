package main

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// harness is one chaos run: the stack it started, the two fleets, and what
// the background loops observed.
type harness struct {
	o      Options
	rng    *mrand.Rand // the chaos schedule's; the producers get seeds drawn from it
	step   func(format string, args ...any)
	cl     *proc.Cleanup
	work   string // logs, binaries, the broker's data
	bin    string
	stream io.Writer // the processes' output, with -v

	pg     *consumertest.Postgres
	dbURL  string
	pool   *pgxpool.Pool
	table  dedup.Table
	engine *dedup.Engine
	clock  simClock

	broker  *localstack.Broker
	brokers []string

	res                      *Result
	consumers, httpConsumers *fleet // httpConsumers is nil without an HTTP group
	provider                 *provider
	// claimClients is the claim-function group (nil without it); a claim
	// client that renames stallFile waits after its database commit.
	claimClients *fleet
	stallFile    string

	maintRuns, maintErrs     atomic.Int64
	txmon                    txMonitor
	snapMu                   sync.Mutex
	snapshots, httpSnapshots []offsetSnapshot
	claimSnapshots           []offsetSnapshot
}

// Run runs one chaos scenario and returns what it observed.
func Run(ctx context.Context, o Options, progress io.Writer) (*Result, error) {
	if o.BugBuckets < 0 || o.BrokenBuckets < 0 || o.BugBuckets+o.BrokenBuckets > 256 {
		return nil, fmt.Errorf("-bug-buckets %d and -broken-buckets %d: at most 256 buckets together", o.BugBuckets, o.BrokenBuckets)
	}
	var cl proc.Cleanup
	defer cl.Run()
	h := &harness{
		o:    o,
		rng:  mrand.New(mrand.NewPCG(o.Seed, o.Seed^0x5851f42d4c957f2d)), //nolint:gosec // G404: a seeded workload, reproducible on purpose
		step: localstack.Steps(progress, "chaos"),
		cl:   &cl,
	}
	if o.Verbose {
		h.stream = progress
	}
	if err := h.build(ctx, progress); err != nil {
		return nil, err
	}
	if err := h.startDatabase(ctx); err != nil {
		return nil, err
	}
	if err := h.startBroker(ctx); err != nil {
		return nil, err
	}
	h.res = &Result{Seed: o.Seed, HTTPConsumers: o.HTTPConsumers, ClaimClients: o.ClaimClients, Pooler: o.Pooler, Bug: h.bug()}
	if err := h.startFleets(); err != nil {
		return nil, err
	}
	return h.run(ctx)
}

// build makes the work directory and builds the consumer and the broker into it.
func (h *harness) build(ctx context.Context, progress io.Writer) error {
	root, err := localstack.Root(h.o.Root)
	if err != nil {
		return err
	}
	if h.work, err = os.MkdirTemp("", "icop-chaos-"); err != nil {
		return err
	}
	if h.o.Keep {
		fmt.Fprintf(progress, "chaos: keeping the work directory %s\n", h.work)
	} else {
		h.cl.Add(func() { _ = os.RemoveAll(h.work) })
	}
	h.step("seed %d; building cmd/consumer, cmd/devbroker, hack/chaos/claimclient and hack/chaos/outboxproducer", h.o.Seed)
	h.bin = filepath.Join(h.work, "bin")
	return proc.Build(ctx, root, h.bin, "./cmd/consumer", "./cmd/devbroker", "./hack/chaos/claimclient", "./hack/chaos/outboxproducer")
}

// startDatabase starts PostgreSQL with the ledger, and creates and maintains
// the dedup table at the first simulated instant.
func (h *harness) startDatabase(ctx context.Context) error {
	h.step("starting PostgreSQL")
	// Commit timestamps let the checker tell when each ledger row became durable.
	var err error
	ddl := append([]string{ledgerDDL, claimLedgerDDL}, h.bug().ddl()...)
	h.pg, h.dbURL, err = localstack.StartPostgres(ctx, h.cl, "chaos", ddl,
		consumertest.WithSetting("track_commit_timestamp", "on"))
	if err != nil {
		return err
	}
	h.clock = simClock{start: time.Now().UTC(), real: time.Now(), speed: h.o.ClockSpeed}
	if h.pool, err = pgxpool.New(ctx, h.dbURL); err != nil {
		return err
	}
	h.cl.Add(h.pool.Close)
	h.table = dedup.Table{Schema: "public", Name: dedupTableName, Scope: dedup.ScopeConsumerGroup, Interval: dedup.Hourly}
	if h.engine, err = dedup.NewEngine(h.pool, h.table, dedup.WithoutFirstPartitions()); err != nil {
		return err
	}
	if err := h.engine.EnsureTable(ctx, "chaos-harness"); err != nil {
		return err
	}
	if _, err := h.engine.Maintain(ctx, h.clock.now(), h.o.Premake, h.o.Retention); err != nil {
		return fmt.Errorf("first maintenance: %w", err)
	}
	return nil
}

// startBroker starts the broker on a fixed port with a data directory, so
// that it can be killed and restarted under the consumers.
func (h *harness) startBroker(ctx context.Context) error {
	h.step("starting the broker (persisted, so it can be killed and restarted)")
	port, err := consumertest.FreePort()
	if err != nil {
		return err
	}
	topics := fmt.Sprintf("%s:%d,%s:1,%s:1", topic, h.o.Partitions, dlqTopic, httpDLQTopic)
	if h.o.OutboxProducers > 0 {
		topics += fmt.Sprintf(",%s:%d,%s:1", outboxTopic, h.o.OutboxPartitions, outboxDLQTopic)
	}
	h.broker, err = localstack.StartBroker(ctx, h.cl, localstack.BrokerOptions{
		Name: "broker", Bin: filepath.Join(h.bin, "devbroker"), LogDir: h.work, Stream: h.stream,
		Args: []string{"-ports", strconv.Itoa(port), "-data-dir", filepath.Join(h.work, "broker"),
			"-topics", topics},
	})
	if err != nil {
		return err
	}
	h.brokers = h.broker.Addrs()
	return nil
}

// startFleets starts the SQL-sink consumers and, with an HTTP group, the
// provider and the HTTP-sink consumers.
func (h *harness) startFleets() error {
	o := h.o
	var err error
	consumerURL := h.dbURL
	var poolerEnv []string
	if o.Pooler {
		pooled, stop, err := consumertest.StartPgBouncerProcess(h.dbURL)
		if err != nil {
			return err
		}
		h.cl.Add(stop)
		consumerURL, poolerEnv = pooled, []string{envvars.DatabasePooler + "=transaction"}
		h.step("PgBouncer in transaction mode between the consumers and PostgreSQL")
	}
	if h.consumers, err = h.startFleet("consumer", group, append(consumerEnv(h.brokers, consumerURL), poolerEnv...), o.Consumers); err != nil {
		return err
	}
	if o.HTTPConsumers > 0 {
		if h.provider, err = startProvider(o.Seed, o.HTTPDelay, o.HTTPDropShare, providerFaults{
			SlowShare: o.HTTPSlowShare, SlowDelay: o.HTTPSlowDelay, RateShare: o.HTTPRateShare, RetryAfter: o.HTTPRetryAfter}); err != nil {
			return err
		}
		h.cl.Add(h.provider.stop)
		env := append(httpConsumerEnv(h.brokers, consumerURL, h.provider.url(), o.HTTPTimeout), poolerEnv...)
		if h.httpConsumers, err = h.startFleet("http-consumer", httpGroup, env, o.HTTPConsumers); err != nil {
			return err
		}
		h.step("%d HTTP consumers started (group %s, provider %s: %s per call, %.0f%% of requests applied and then dropped, %.1f%% taking %s past the %s timeout (409 to their retries), %.1f%% answered 429 with Retry-After %s)",
			o.HTTPConsumers, httpGroup, h.provider.url(), o.HTTPDelay, 100*o.HTTPDropShare, 100*o.HTTPSlowShare, o.HTTPSlowDelay, o.HTTPTimeout, 100*o.HTTPRateShare, o.HTTPRetryAfter)
	}
	if o.ClaimClients > 0 {
		h.stallFile = filepath.Join(h.work, "claim-stall")
		env := claimClientEnv(h.brokers, consumerURL, h.table.ClaimFunction(), h.stallFile)
		if h.claimClients, err = h.startProcesses("claim-client", claimGroup, "claimclient", env, o.ClaimClients); err != nil {
			return err
		}
		h.step("%d claim clients started (group %s: kafka-go and pgx in exec mode, %s per batch, as docs/any-language.md says)",
			o.ClaimClients, claimGroup, h.table.ClaimFunction())
	}
	h.step("%d consumers started; producing %d messages over %s with %d kills, %d PostgreSQL and %d broker restarts",
		o.Consumers, o.Events, o.ProduceFor, o.Kills, o.PostgresRestarts, o.BrokerRestarts)
	return nil
}

// startFleet starts n consumers of group with env (and -isolation's
// CONSUMER_ISOLATION); the cleanup stops them.
func (h *harness) startFleet(prefix, group string, env []string, n int) (*fleet, error) {
	if h.o.Isolation != "" {
		env = append(env, envvars.Isolation+"="+h.o.Isolation)
	}
	return h.startProcesses(prefix, group, "consumer", env, n)
}

// startProcesses starts n processes of the binary bin (built into the work
// directory) as a fleet of group; the cleanup stops them.
func (h *harness) startProcesses(prefix, group, bin string, env []string, n int) (*fleet, error) {
	f := newFleet(prefix, group, filepath.Join(h.bin, bin), h.work, h.stream, env)
	h.cl.Add(f.stopAll)
	return f, f.startN(n)
}

// run produces the events while the chaos schedule and the background loops
// run, waits for the consumers to catch up, and checks the invariants.
func (h *harness) run(ctx context.Context) (*Result, error) {
	res := h.res
	// Seeds for the producers, drawn before the chaos schedule starts using rng.
	plainSeed, txnSeed := h.rng.Uint64(), h.rng.Uint64()
	runCtx, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	var wg sync.WaitGroup
	h.startBackground(runCtx, &wg)
	sched := h.startSchedule(runCtx)
	txns, prodErr := h.produce(runCtx, plainSeed, txnSeed)
	if prodErr != nil {
		stopBackground()
	}
	<-sched.done
	if prodErr != nil || sched.err != nil {
		stopBackground()
		wg.Wait()
		if prodErr != nil {
			return res, prodErr
		}
		return res, sched.err
	}
	if err := h.consumers.fillTo(h.o.Consumers); err != nil {
		return res, err
	}
	if h.httpConsumers != nil {
		if err := h.httpConsumers.fillTo(h.o.HTTPConsumers); err != nil {
			return res, err
		}
	}
	if h.claimClients != nil {
		if err := h.claimClients.fillTo(h.o.ClaimClients); err != nil {
			return res, err
		}
	}

	lagErr := h.waitForLagZero(runCtx)
	stopBackground()
	wg.Wait()
	res.MaintenanceRuns, res.MaintenanceErrors = h.maintRuns.Load(), h.maintErrs.Load()
	if byApp, top, err := h.txmon.result(); err == nil {
		res.TxSampled, res.MaxTxOpen, res.MaxTxOpenSQL, res.MaxTxOpenHTTP = true, top, byApp[sqlApp], byApp[httpApp]
	}
	if lagErr != nil {
		return res, lagErr
	}
	res.LagZero = true
	if err := h.check(ctx, txns); err != nil {
		return res, err
	}
	if h.o.BugBuckets > 0 {
		if err := h.replayPhase(ctx); err != nil {
			return res, err
		}
	}
	if h.o.OutboxProducers > 0 {
		var err error
		res.Outbox, err = h.outboxPhase(ctx)
		return res, err
	}
	return res, nil
}

// bug is the run's ledger bug (see replay.go): none without BugBuckets.
func (h *harness) bug() bug {
	if h.o.BugBuckets <= 0 {
		return bug{}
	}
	return bug{Fixable: h.o.BugBuckets, Broken: h.o.BrokenBuckets}
}

// produce runs the plain and the transactional producer side by side, then
// writes the sentinels.
func (h *harness) produce(ctx context.Context, plainSeed, txnSeed uint64) (*txnLog, error) {
	res := h.res
	txns := newTxnLog()
	var txnErr error
	txnDone := make(chan struct{})
	go func() {
		defer close(txnDone)
		txnErr = produceTxns(ctx, h.o, txnSeed, h.brokers, h.clock, txns)
	}()
	err := produce(ctx, h.o, plainSeed, h.brokers, h.clock, res)
	<-txnDone
	if err == nil {
		err = txnErr
	}
	if err == nil {
		err = writeSentinels(ctx, h.o, h.brokers, h.clock, mrand.New(mrand.NewPCG(plainSeed, 13))) //nolint:gosec // G404: a seeded workload, reproducible on purpose
	}
	res.TxnCommitted, res.TxnAborted, res.TxnUnknown = txns.txns[txnCommitted], txns.txns[txnAborted], txns.txns[txnUnknown]
	h.step("produced %d plain messages and %d transactions (%d committed, %d aborted, %d unknown); waiting for the chaos schedule to finish",
		res.Produced, res.TxnCommitted+res.TxnAborted+res.TxnUnknown, res.TxnCommitted, res.TxnAborted, res.TxnUnknown)
	return txns, err
}

// startBackground starts, until ctx ends: partition maintenance on the fast
// clock, the pg_stat_activity monitor, and the committed-offset snapshots
// (checked against the ledger and the HTTP group's dedup rows at the end).
func (h *harness) startBackground(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() {
		for ctx.Err() == nil {
			mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := h.engine.Maintain(mctx, h.clock.now(), h.o.Premake, h.o.Retention)
			cancel()
			h.maintRuns.Add(1)
			if err != nil && ctx.Err() == nil {
				h.maintErrs.Add(1)
			}
			localstack.Sleep(ctx, 250*time.Millisecond)
		}
	})
	wg.Go(func() { h.txmon.run(ctx, h.dbURL, []string{sqlApp, httpApp}, 20*time.Millisecond) })
	wg.Go(func() {
		for ctx.Err() == nil {
			h.snapshot(ctx, group, &h.snapshots)
			if h.httpConsumers != nil {
				h.snapshot(ctx, httpGroup, &h.httpSnapshots)
			}
			if h.claimClients != nil {
				h.snapshot(ctx, claimGroup, &h.claimSnapshots)
			}
			localstack.Sleep(ctx, 500*time.Millisecond)
		}
	})
}

// snapshot appends group's committed offsets to *into (nothing on an error).
func (h *harness) snapshot(ctx context.Context, group string, into *[]offsetSnapshot) {
	s, err := snapshotOffsets(ctx, h.brokers, group, h.o.Partitions)
	if err != nil {
		return
	}
	h.snapMu.Lock()
	*into = append(*into, s)
	h.snapMu.Unlock()
}

// waitForLagZero waits for each group's lag to reach zero.
func (h *harness) waitForLagZero(ctx context.Context) error {
	h.step("waiting for consumer lag to reach zero")
	if err := h.consumers.waitForLagZero(ctx, h.brokers, h.o.Partitions, 5*time.Minute); err != nil {
		return err
	}
	if h.httpConsumers != nil {
		h.step("waiting for the HTTP group's lag to reach zero")
		if err := h.httpConsumers.waitForLagZero(ctx, h.brokers, h.o.Partitions, 5*time.Minute); err != nil {
			return err
		}
	}
	if h.claimClients != nil {
		h.step("waiting for the claim clients' lag to reach zero")
		if err := h.claimClients.waitForLagZero(ctx, h.brokers, h.o.Partitions, 5*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// check runs a last maintenance and checks the partitions, stops the
// consumers, scans their logs, and checks the invariants of both groups.
func (h *harness) check(ctx context.Context, txns *txnLog) error {
	res := h.res
	// One last maintenance at the final simulated instant, then the table
	// must hold exactly the planned partitions.
	final := h.clock.now()
	if _, err := h.engine.Maintain(ctx, final, h.o.Premake, h.o.Retention); err != nil {
		return fmt.Errorf("final maintenance: %w", err)
	}
	st, err := h.engine.Observe(ctx)
	if err != nil {
		return err
	}
	res.checkPartitions(st, dedup.PlanPartitions(final, h.table.Interval, h.o.Premake, h.o.Retention, h.table.Name, nil))

	h.step("stopping consumers and checking invariants")
	h.consumers.stopAll()
	if h.httpConsumers != nil {
		h.httpConsumers.stopAll()
	}
	if h.claimClients != nil {
		h.claimClients.stopAll()
	}
	// Log hygiene: the consumers ran through database and broker failures
	// with a password in their database URL; it must appear in no log.
	leaks, err := localstack.SecretInLogs(h.work, h.pg.Password())
	if err != nil {
		return err
	}
	res.LogsChecked, res.SecretLeaks = leaks.Checked, leaks.Files
	if err := res.verify(ctx, h.brokers, h.dbURL, h.o.Partitions, h.snapshots, txns); err != nil {
		return err
	}
	if h.provider != nil {
		if err := res.verifyHTTP(ctx, h.brokers, h.dbURL, h.provider, h.httpSnapshots, txns); err != nil {
			return err
		}
	}
	if h.claimClients != nil {
		return res.verifyClaim(ctx, h.dbURL, h.claimSnapshots, txns)
	}
	return nil
}
