package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

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
	// Isolation, when set, is the consumers' CONSUMER_ISOLATION.
	Isolation  string
	ProduceFor time.Duration
	// ClockSpeed is how much faster than real time the partition maintenance
	// and the event ids' timestamps run: with Hourly partitions and 600x, a new
	// partition every 6 real seconds.
	ClockSpeed float64
	Premake    int
	Retention  time.Duration // in simulated time
	Seed       uint64
	Verbose    bool
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
		ProduceFor:       90 * time.Second,
		ClockSpeed:       600,
		Premake:          24,
		Retention:        72 * time.Hour,
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
	o.Partitions = 4
	o.ProduceFor = 25 * time.Second
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

// simClock runs ClockSpeed times faster than real time from a start instant.
type simClock struct {
	start time.Time
	real  time.Time
	speed float64
}

func (c simClock) now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.real)) * c.speed))
}

// Run runs one chaos scenario and returns what it observed.
func Run(ctx context.Context, o Options, progress io.Writer) (*Result, error) {
	rng := mrand.New(mrand.NewPCG(o.Seed, o.Seed^0x5851f42d4c957f2d))
	started := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(progress, "chaos [%5.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	var cl proc.Cleanup
	defer cl.Run()

	root := o.Root
	if root == "" {
		var err error
		if root, err = proc.FindRoot(); err != nil {
			return nil, err
		}
	}
	work, err := os.MkdirTemp("", "icop-chaos-")
	if err != nil {
		return nil, err
	}
	if o.Keep {
		fmt.Fprintf(progress, "chaos: keeping the work directory %s\n", work)
	} else {
		cl.Add(func() { _ = os.RemoveAll(work) })
	}
	var stream io.Writer
	if o.Verbose {
		stream = progress
	}

	step("seed %d; building cmd/consumer and cmd/devbroker", o.Seed)
	bin := filepath.Join(work, "bin")
	if err := proc.Build(ctx, root, bin, "./cmd/consumer", "./cmd/devbroker"); err != nil {
		return nil, err
	}

	step("starting PostgreSQL")
	// Commit timestamps let the checker tell when each ledger row became durable.
	pg, err := consumertest.StartPostgres(consumertest.WithSetting("track_commit_timestamp", "on"))
	if err != nil {
		return nil, err
	}
	cl.Add(func() { _ = pg.Stop() })
	if err := execSQL(ctx, pg.URL("postgres"), "CREATE DATABASE chaos"); err != nil {
		return nil, err
	}
	dbURL := pg.URL("chaos")
	if err := execSQL(ctx, dbURL, ledgerDDL); err != nil {
		return nil, err
	}

	clock := simClock{start: time.Now().UTC(), real: time.Now(), speed: o.ClockSpeed}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	cl.Add(pool.Close)
	table := dedup.Table{Schema: "public", Name: dedupTableName, Scope: dedup.ScopeConsumerGroup, Interval: dedup.Hourly}
	engine, err := dedup.NewEngine(pool, table)
	if err != nil {
		return nil, err
	}
	if err := engine.EnsureTable(ctx, "chaos-harness"); err != nil {
		return nil, err
	}
	if _, err := engine.Maintain(ctx, clock.now(), o.Premake, o.Retention); err != nil {
		return nil, fmt.Errorf("first maintenance: %w", err)
	}

	step("starting the broker (persisted, so it can be killed and restarted)")
	port, err := consumertest.FreePort()
	if err != nil {
		return nil, err
	}
	brokerArgs := []string{"-ports", strconv.Itoa(port), "-data-dir", filepath.Join(work, "broker"),
		"-topics", fmt.Sprintf("%s:%d,%s:1,%s:1", topic, o.Partitions, dlqTopic, httpDLQTopic)}
	var brokerMu sync.Mutex
	broker, err := proc.Start("broker", proc.Options{LogDir: work, Stream: stream}, filepath.Join(bin, "devbroker"), brokerArgs...)
	if err != nil {
		return nil, err
	}
	cl.Add(func() { brokerMu.Lock(); broker.Stop(5 * time.Second); brokerMu.Unlock() })
	addr, err := broker.WaitForLine(ctx, "BROKERS ", 30*time.Second)
	if err != nil {
		return nil, err
	}
	brokers := strings.Split(addr, ",")

	res := &Result{Seed: o.Seed, HTTPConsumers: o.HTTPConsumers}
	env := consumerEnv(brokers, dbURL)
	if o.Isolation != "" {
		env = append(env, envvars.Isolation+"="+o.Isolation)
	}
	consumers := newFleet("consumer", group, filepath.Join(bin, "consumer"), work, stream, env)
	cl.Add(consumers.stopAll)
	for range o.Consumers {
		if err := consumers.start(); err != nil {
			return nil, err
		}
	}
	var provider *provider
	var httpConsumers *fleet
	if o.HTTPConsumers > 0 {
		if provider, err = startProvider(o.Seed, o.HTTPDelay, o.HTTPDropShare); err != nil {
			return nil, err
		}
		cl.Add(provider.stop)
		henv := httpConsumerEnv(brokers, dbURL, provider.url())
		if o.Isolation != "" {
			henv = append(henv, envvars.Isolation+"="+o.Isolation)
		}
		httpConsumers = newFleet("http-consumer", httpGroup, filepath.Join(bin, "consumer"), work, stream, henv)
		cl.Add(httpConsumers.stopAll)
		for range o.HTTPConsumers {
			if err := httpConsumers.start(); err != nil {
				return nil, err
			}
		}
		step("%d HTTP consumers started (group %s, provider %s: %s per call, %.0f%% of requests applied and then dropped)",
			o.HTTPConsumers, httpGroup, provider.url(), o.HTTPDelay, 100*o.HTTPDropShare)
	}
	step("%d consumers started; producing %d messages over %s with %d kills, %d PostgreSQL and %d broker restarts",
		o.Consumers, o.Events, o.ProduceFor, o.Kills, o.PostgresRestarts, o.BrokerRestarts)

	// Seeds for the producers, drawn before the chaos schedule starts using rng.
	plainSeed, txnSeed := rng.Uint64(), rng.Uint64()
	runCtx, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	var wg sync.WaitGroup
	var maintErrs, maintRuns atomic.Int64
	wg.Go(func() { // partition maintenance on the fast clock
		for runCtx.Err() == nil {
			mctx, cancel := context.WithTimeout(runCtx, 10*time.Second)
			_, err := engine.Maintain(mctx, clock.now(), o.Premake, o.Retention)
			cancel()
			maintRuns.Add(1)
			if err != nil && runCtx.Err() == nil {
				maintErrs.Add(1)
			}
			sleepCtx(runCtx, 250*time.Millisecond)
		}
	})
	var txmon txMonitor
	wg.Go(func() { txmon.run(runCtx, dbURL, []string{sqlApp, httpApp}, 20*time.Millisecond) })
	var snapshots, httpSnapshots []offsetSnapshot
	var snapMu sync.Mutex
	wg.Go(func() { // committed-offset snapshots, checked against the ledger (and the HTTP group's dedup rows) at the end
		for runCtx.Err() == nil {
			if s, err := snapshotOffsets(runCtx, brokers, group, o.Partitions); err == nil {
				snapMu.Lock()
				snapshots = append(snapshots, s)
				snapMu.Unlock()
			}
			if httpConsumers != nil {
				if s, err := snapshotOffsets(runCtx, brokers, httpGroup, o.Partitions); err == nil {
					snapMu.Lock()
					httpSnapshots = append(httpSnapshots, s)
					snapMu.Unlock()
				}
			}
			sleepCtx(runCtx, 500*time.Millisecond)
		}
	})

	// The chaos schedule: events spread evenly over the production period.
	type action struct {
		at   time.Duration
		kind string
	}
	var plan []action
	for i := range o.Kills {
		plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (float64(i) + rng.Float64()) / float64(o.Kills)), "kill"})
	}
	if httpConsumers != nil {
		for i := range o.HTTPKills {
			plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (float64(i) + rng.Float64()) / float64(o.HTTPKills)), "kill-http"})
		}
	}
	for i := range o.PostgresRestarts {
		plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (0.3 + 0.4*float64(i)/float64(max(1, o.PostgresRestarts)))), "pg"})
	}
	for i := range o.BrokerRestarts {
		plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (0.55 + 0.3*float64(i)/float64(max(1, o.BrokerRestarts)))), "broker"})
	}
	var chaosErr error
	scheduleDone := make(chan struct{})
	go func() {
		defer close(scheduleDone)
		t0 := time.Now()
		for _, a := range sortActions(plan, func(a action) time.Duration { return a.at }) {
			if !sleepCtx(runCtx, time.Until(t0.Add(a.at))) {
				return
			}
			switch a.kind {
			case "kill":
				// Half the kills wait (up to 2s) to land right after a database commit (the
				// ledger grew a moment ago), when the offset commit is most
				// likely still in flight: the window the design must cover.
				when := "at a random moment"
				if rng.IntN(2) == 0 && waitForLedgerCommit(runCtx, pool, 2*time.Second) {
					when = "right after a database commit"
					res.KillsAfterCommit++
				}
				victim, err := killAndReplace(consumers, o.Consumers, rng)
				if err != nil {
					chaosErr = err
					return
				}
				res.Kills++
				step("kill -9 %s %s; %d consumers running", victim, when, consumers.alive())
			case "kill-http":
				victim, err := killAndReplace(httpConsumers, o.HTTPConsumers, rng)
				if err != nil {
					chaosErr = err
					return
				}
				res.HTTPKills++
				step("kill -9 %s; %d HTTP consumers running", victim, httpConsumers.alive())
			case "pg":
				step("PostgreSQL: crash (SIGKILL) and restart")
				_ = pg.Kill()
				sleepCtx(runCtx, time.Second)
				if err := pg.Start(); err != nil {
					chaosErr = fmt.Errorf("restarting PostgreSQL: %w", err)
					return
				}
				res.PostgresRestarts++
			case "broker":
				step("broker: kill -9 and restart from its data dir")
				brokerMu.Lock()
				broker.Kill()
				sleepCtx(runCtx, time.Second)
				b, err := proc.Start("broker", proc.Options{LogDir: work, Stream: stream, AppendLog: true},
					filepath.Join(bin, "devbroker"), brokerArgs...)
				if err == nil {
					broker = b
					_, err = b.WaitForLine(runCtx, "BROKERS ", 30*time.Second)
				}
				brokerMu.Unlock()
				if err != nil {
					chaosErr = fmt.Errorf("restarting the broker: %w", err)
					return
				}
				res.BrokerRestarts++
			}
		}
	}()

	txns := newTxnLog()
	var txnErr error
	txnDone := make(chan struct{})
	go func() {
		defer close(txnDone)
		txnErr = produceTxns(runCtx, o, txnSeed, brokers, clock, txns)
	}()
	prodErr := produce(runCtx, o, plainSeed, brokers, clock, res)
	<-txnDone
	if prodErr == nil {
		prodErr = txnErr
	}
	if prodErr == nil {
		prodErr = writeSentinels(runCtx, o, brokers, clock, mrand.New(mrand.NewPCG(plainSeed, 13)))
	}
	res.TxnCommitted, res.TxnAborted, res.TxnUnknown = txns.txns[txnCommitted], txns.txns[txnAborted], txns.txns[txnUnknown]
	step("produced %d plain messages and %d transactions (%d committed, %d aborted, %d unknown); waiting for the chaos schedule to finish",
		res.Produced, res.TxnCommitted+res.TxnAborted+res.TxnUnknown, res.TxnCommitted, res.TxnAborted, res.TxnUnknown)
	if prodErr != nil {
		stopBackground()
	}
	<-scheduleDone
	if prodErr != nil || chaosErr != nil {
		stopBackground()
		wg.Wait()
		if prodErr != nil {
			return res, prodErr
		}
		return res, chaosErr
	}
	for consumers.alive() < o.Consumers {
		if err := consumers.start(); err != nil {
			return res, err
		}
	}
	for httpConsumers != nil && httpConsumers.alive() < o.HTTPConsumers {
		if err := httpConsumers.start(); err != nil {
			return res, err
		}
	}

	step("waiting for consumer lag to reach zero")
	lagErr := waitForLagZero(runCtx, brokers, o.Partitions, 5*time.Minute, consumers)
	if lagErr == nil && httpConsumers != nil {
		step("waiting for the HTTP group's lag to reach zero")
		lagErr = waitForLagZero(runCtx, brokers, o.Partitions, 5*time.Minute, httpConsumers)
	}
	stopBackground()
	wg.Wait()
	res.MaintenanceRuns, res.MaintenanceErrors = maintRuns.Load(), maintErrs.Load()
	if byApp, top, err := txmon.result(); err == nil {
		res.TxSampled, res.MaxTxOpen, res.MaxTxOpenSQL, res.MaxTxOpenHTTP = true, top, byApp[sqlApp], byApp[httpApp]
	}
	if lagErr != nil {
		return res, lagErr
	}
	res.LagZero = true
	// One last maintenance at the final simulated instant, then the table
	// must hold exactly the planned partitions.
	final := clock.now()
	if _, err := engine.Maintain(ctx, final, o.Premake, o.Retention); err != nil {
		return res, fmt.Errorf("final maintenance: %w", err)
	}
	st, err := engine.Observe(ctx)
	if err != nil {
		return res, err
	}
	res.checkPartitions(st, dedup.PlanPartitions(final, table.Interval, o.Premake, o.Retention, table.Name, nil))

	step("stopping consumers and checking invariants")
	consumers.stopAll()
	if httpConsumers != nil {
		httpConsumers.stopAll()
	}
	// Log hygiene: the consumers ran through database and broker failures
	// with a password in their database URL; it must appear in no log.
	if leaks, err := secretInLogs(work, pg.Password()); err != nil {
		return res, err
	} else {
		res.LogsChecked, res.SecretLeaks = leaks.checked, leaks.files
	}
	if err := res.verify(ctx, brokers, dbURL, o.Partitions, snapshots, txns); err != nil {
		return res, err
	}
	if provider != nil {
		if err := res.verifyHTTP(ctx, brokers, dbURL, provider, httpSnapshots, txns); err != nil {
			return res, err
		}
	}
	return res, nil
}

type leakReport struct {
	checked int
	files   []string
}

// secretInLogs lists the *.log files under dir that contain secret.
func secretInLogs(dir, secret string) (leakReport, error) {
	var r leakReport
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return r, err
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return r, err
		}
		r.checked++
		if strings.Contains(string(b), secret) {
			r.files = append(r.files, filepath.Base(l))
		}
	}
	return r, nil
}

// waitForLedgerCommit polls the ledger until a new row is visible (that is,
// committed), or the timeout passes.
func waitForLedgerCommit(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) bool {
	var before int64
	if err := pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM ledger").Scan(&before); err != nil {
		return false
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var now int64
		if err := pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM ledger").Scan(&now); err != nil {
			return false
		}
		if now != before {
			return true
		}
		if !sleepCtx(ctx, 2*time.Millisecond) {
			return false
		}
	}
	return false
}

// killAndReplace kill -9s one of f's consumers and replaces it, now and then
// with one more or one fewer than usual: every change is a rebalance.
func killAndReplace(f *fleet, usual int, rng *mrand.Rand) (string, error) {
	victim := f.killRandom(rng)
	n := 1
	switch {
	case f.alive() < usual:
		n = usual - f.alive()
	case rng.IntN(4) == 0:
		n = 0
	}
	if f.alive()+n == 0 {
		n = 1
	}
	for range n {
		if err := f.start(); err != nil {
			return victim, err
		}
	}
	return victim, nil
}

// httpConsumerEnv is the HTTP group's environment: the http sink (an external
// handler, Key ordering and 64 in flight by default) posting to the provider.
func httpConsumerEnv(brokers []string, dbURL, providerURL string) []string {
	var env []string
	for _, kv := range consumerEnv(brokers, dbURL) {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case envvars.Group, envvars.DeadLetterTopic, envvars.Sink, envvars.SinkSQLStatement, envvars.ClientID:
		default:
			env = append(env, kv)
		}
	}
	return append(env,
		envvars.Group+"="+httpGroup,
		envvars.DeadLetterTopic+"="+httpDLQTopic,
		envvars.ClientID+"="+httpApp,
		envvars.Sink+"=http",
		envvars.SinkHTTPURL+"="+providerURL,
	)
}

func consumerEnv(brokers []string, dbURL string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		envvars.Brokers + "=" + strings.Join(brokers, ","),
		envvars.Topic + "=" + topic,
		envvars.Group + "=" + group,
		envvars.ClientID + "=" + sqlApp,
		envvars.DeadLetterTopic + "=" + dlqTopic,
		envvars.DatabaseURL + "=" + dbURL,
		envvars.Sink + "=sql",
		envvars.SinkSQLStatement + "=" + ledgerStatement,
		envvars.SessionTimeout + "=2s",
		envvars.HeartbeatInterval + "=200ms",
		envvars.RebalanceTimeout + "=4s",
		envvars.BatchMaxMessages + "=200",
		envvars.BatchMaxWait + "=20ms",
		envvars.RetryBackoffMax + "=1s",
		envvars.LogLevel + "=info",
	}
}

// chaosEvent is the JSON envelope produced.
type chaosEvent struct {
	EventID string `json:"eventId"`
	Type    string `json:"type"`
	Payload struct {
		Amount int64 `json:"amount"`
	} `json:"payload"`
}

// produce writes o.Events messages at an even rate over o.ProduceFor: new ids
// stamped with the simulated clock, duplicates of recent ids (other keys, so
// other partitions too), replays of older ranges, and malformed messages.
// Writes are retried until they succeed, across broker restarts; a retried
// batch may land twice, which is just more duplicates.
func produce(ctx context.Context, o Options, seed uint64, brokers []string, clock simClock, res *Result) error {
	rng := mrand.New(mrand.NewPCG(seed, 7))
	w := consumertest.NewWriter(brokers, topic)
	w.MaxAttempts = 3
	defer w.Close()
	var ids []uuid.UUID
	const batch = 100
	start := time.Now()
	for sent := 0; sent < o.Events; {
		msgs := make([]kafka.Message, 0, batch)
		for len(msgs) < batch && sent+len(msgs) < o.Events {
			r := rng.Float64()
			switch {
			case r < o.MalformedShare:
				msgs = append(msgs, kafka.Message{Key: []byte("bad"), Value: malformed(rng)})
			case r < o.MalformedShare+o.DuplicateShare && len(ids) > 0:
				var id uuid.UUID
				if rng.IntN(5) == 0 { // a replay from anywhere earlier
					id = ids[rng.IntN(len(ids))]
				} else { // a recent duplicate
					id = ids[len(ids)-1-rng.IntN(min(len(ids), 500))]
				}
				key := id.String()
				if rng.IntN(2) == 0 {
					key = "dup-" + strconv.Itoa(rng.IntN(1000))
				}
				msgs = append(msgs, kafka.Message{Key: []byte(key), Value: encode(id)})
			default:
				id := newV7At(clock.now(), rng)
				ids = append(ids, id)
				msgs = append(msgs, kafka.Message{Key: []byte(id.String()), Value: encode(id)})
			}
		}
		for {
			err := w.WriteMessages(ctx, msgs...)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.ProduceRetries++
			time.Sleep(200 * time.Millisecond)
		}
		sent += len(msgs)
		res.Produced = sent
		// Pace to spread the stream over ProduceFor.
		due := start.Add(time.Duration(float64(o.ProduceFor) * float64(sent) / float64(o.Events)))
		sleepCtx(ctx, time.Until(due))
	}
	return nil
}

// encode gives every id a deterministic amount, so the ledger total is checkable.
func encode(id uuid.UUID) []byte {
	e := chaosEvent{EventID: id.String(), Type: "chaos"}
	e.Payload.Amount = amountOf(id)
	b, _ := json.Marshal(e)
	return b
}

func amountOf(id uuid.UUID) int64 { return int64(id[15]) + 1 }

func malformed(rng *mrand.Rand) []byte {
	switch rng.IntN(4) {
	case 0:
		return []byte("not json at all")
	case 1:
		return []byte(`{"type":"chaos"}`)
	case 2:
		return []byte(`{"eventId":"not-a-uuid"}`)
	default:
		return []byte(`{"eventId":"` + uuid.New().String() + `"}`) // v4
	}
}

func newV7At(t time.Time, rng *mrand.Rand) uuid.UUID {
	var u uuid.UUID
	for i := range u {
		u[i] = byte(rng.Uint32())
	}
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (8 * (5 - i)))
	}
	u[6] = (u[6] & 0x0f) | 0x70
	u[8] = (u[8] & 0x3f) | 0x80
	return u
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func sortActions[T any](xs []T, key func(T) time.Duration) []T {
	out := append([]T(nil), xs...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && key(out[j]) < key(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
