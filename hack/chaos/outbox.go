package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// The outbox chain: producer services (hack/chaos/outboxproducer) write
// orders and their OrderPlaced events in one transaction (outbox.Emit),
// rolling some back on purpose, while they are kill -9ed; `consumer
// outbox-relay` replicas publish the outbox to its topic while they are
// kill -9ed (half the time the owner of the stream); PostgreSQL crashes and
// restarts once, the broker once; consumers of the outbox topic (the
// runtime, SQL sink, CONSUMER_ENVELOPE=cloudevents: the id is the relay's
// ce_id header) apply each event into outbox_applied, and are kill -9ed too.
// Then the check (checkoutbox.go) holds the topic against the business rows:
//
//	RESULT outbox_chaos committed=N published_distinct=N lost=0 order_violations=0 uncommitted_published=0 applied_twice=0 ...
const (
	outboxTopic        = "chaos.outbox"
	outboxDLQTopic     = "chaos.outbox.dlq"
	outboxGroup        = "chaos-outbox"
	outboxApp          = "chaos-outbox"
	outboxTableName    = "outbox"
	outboxDedupTable   = "outbox_processed"
	outboxOrdersTable  = "orders"
	outboxAppliedTable = "outbox_applied"
	outboxOwner        = "chaos-harness"
)

// outboxDDL are the business table (a row per order of a committed
// transaction) and the consumer's effects (no unique constraint: applying
// an event twice shows as two rows).
var outboxDDL = []string{
	`CREATE TABLE IF NOT EXISTS ` + outboxOrdersTable + ` (
		key      text NOT NULL,
		seq      int NOT NULL,
		uid      uuid NOT NULL UNIQUE,
		event_id uuid NOT NULL UNIQUE,
		PRIMARY KEY (key, seq)
	)`,
	`CREATE TABLE IF NOT EXISTS ` + outboxAppliedTable + ` (
		id       bigserial PRIMARY KEY,
		event_id uuid NOT NULL,
		key      text NOT NULL,
		seq      int NOT NULL,
		uid      uuid NOT NULL
	)`,
}

// outboxApplyStatement is the outbox consumers' SQL sink: $1 the event id
// (ce_id), $2 the value (the producer's payload), $3 the record key.
const outboxApplyStatement = `INSERT INTO ` + outboxAppliedTable + ` (event_id, key, seq, uid)
	VALUES ($1, convert_from($3, 'UTF8'), ($2::jsonb->>'seq')::int, ($2::jsonb->>'uid')::uuid)`

// outboxChain is the chain's processes and files.
type outboxChain struct {
	producers, relays, consumers *fleet
	rollbackFile                 string
	res                          *OutboxResult
}

// RunOutbox runs the outbox chain alone: its own PostgreSQL and broker, the
// chain's processes, the chaos and the check.
func RunOutbox(ctx context.Context, o Options, progress io.Writer) (*OutboxResult, error) {
	var cl proc.Cleanup
	defer cl.Run()
	h := &harness{
		o:    o,
		rng:  mrand.New(mrand.NewPCG(o.Seed, o.Seed^0x2545f4914f6cdd1d)), //nolint:gosec // G404: a seeded workload, reproducible on purpose
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
	return h.outboxPhase(ctx)
}

// outboxPhase sets the chain up, runs it under the chaos schedule, waits
// for every committed event to be applied, and checks.
func (h *harness) outboxPhase(ctx context.Context) (*OutboxResult, error) {
	o := h.o
	r := &OutboxResult{Producers: o.OutboxProducers, Relays: o.OutboxRelays, Consumers: o.OutboxConsumers}
	h.step("outbox chain: %d producer services, %d relays, %d consumers of %s; %d producer, %d relay and %d consumer kills, a PostgreSQL and a broker restart over %s",
		o.OutboxProducers, o.OutboxRelays, o.OutboxConsumers, outboxTopic, o.OutboxProducerKills, o.OutboxRelayKills, o.OutboxConsumerKills, o.OutboxFor)
	if err := h.setupOutbox(ctx); err != nil {
		return r, err
	}
	c := &outboxChain{rollbackFile: filepath.Join(h.work, "outbox-rolled-back"), res: r}
	var err error
	if c.consumers, err = h.startProcesses("outbox-consumer", outboxGroup, "consumer", outboxConsumerEnv(h.brokers, h.dbURL), o.OutboxConsumers); err != nil {
		return r, err
	}
	c.consumers.topic = outboxTopic
	relays := newFleet("outbox-relay", "", filepath.Join(h.bin, "consumer"), h.work, h.stream, outboxRelayEnv(h.brokers, h.dbURL))
	relays.args = []string{"outbox-relay"}
	h.cl.Add(relays.stopAll)
	c.relays = relays
	if err := relays.startN(o.OutboxRelays); err != nil {
		return r, err
	}
	if c.producers, err = h.startProcesses("outbox-producer", "", "outboxproducer", outboxProducerEnv(h.dbURL, c.rollbackFile, o), o.OutboxProducers); err != nil {
		return r, err
	}
	if err := h.runOutboxSchedule(ctx, c); err != nil {
		return r, err
	}
	h.step("outbox chain: stopping the producers; waiting for every committed event to be applied")
	c.producers.stopAll()
	if err := c.relays.fillTo(o.OutboxRelays); err != nil {
		return r, err
	}
	if err := c.consumers.fillTo(o.OutboxConsumers); err != nil {
		return r, err
	}
	waitErr := h.waitOutboxApplied(ctx, c, 3*time.Minute)
	if waitErr == nil {
		// Republished events too: the group reads the topic to its end.
		waitErr = c.consumers.waitForLagZero(ctx, h.brokers, o.OutboxPartitions, 2*time.Minute)
	}
	r.LagZero = waitErr == nil
	c.relays.stopAll()
	c.consumers.stopAll()
	if waitErr != nil {
		h.step("outbox chain: %v", waitErr)
	}
	hist, err := readOutboxHistory(ctx, h.dbURL, h.brokers, o.OutboxPartitions, c.rollbackFile)
	if err != nil {
		return r, err
	}
	checkOutbox(hist, r)
	return r, nil
}

// setupOutbox creates the business tables, the outbox (made and kept by
// the harness, on the real clock) and the outbox consumers' dedup table.
func (h *harness) setupOutbox(ctx context.Context) error {
	for _, ddl := range outboxDDL {
		if _, err := h.pool.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("outbox chain: %w", err)
		}
	}
	tbl := outbox.Table{Name: outboxTableName, Interval: dedup.Hourly}
	if err := outbox.Ensure(ctx, h.pool, tbl, outboxOwner); err != nil {
		return err
	}
	if _, err := outbox.Maintain(ctx, h.pool, tbl, time.Now(), 4, 48*time.Hour); err != nil {
		return fmt.Errorf("outbox chain: keeping the outbox's partitions: %w", err)
	}
	eng, err := dedup.NewEngine(h.pool, dedup.Table{Schema: "public", Name: outboxDedupTable, Scope: dedup.ScopeConsumerGroup, Interval: dedup.Hourly},
		dedup.WithoutFirstPartitions())
	if err != nil {
		return err
	}
	if err := eng.EnsureTable(ctx, outboxOwner); err != nil {
		return err
	}
	if _, err := eng.Maintain(ctx, time.Now(), 24, 72*time.Hour); err != nil {
		return fmt.Errorf("outbox chain: keeping the dedup table's partitions: %w", err)
	}
	return nil
}

// outboxPlan spreads each kind of kill evenly over the phase (each at a
// random moment of its slice) and puts the PostgreSQL restart at 40% and
// the broker restart at 65% of it.
func (h *harness) outboxPlan() []action {
	o := h.o
	var plan []action
	spread := func(n int, kind string) {
		for i := range n {
			plan = append(plan, action{time.Duration(float64(o.OutboxFor) * (float64(i) + h.rng.Float64()) / float64(n)), kind})
		}
	}
	spread(o.OutboxProducerKills, "kill-producer")
	spread(o.OutboxRelayKills, "kill-relay")
	spread(o.OutboxConsumerKills, "kill-outbox-consumer")
	plan = append(plan, action{time.Duration(float64(o.OutboxFor) * 0.4), "pg"}, action{time.Duration(float64(o.OutboxFor) * 0.65), "broker"})
	slices.SortStableFunc(plan, func(a, b action) int { return cmp.Compare(a.at, b.at) })
	return plan
}

// runOutboxSchedule carries the plan out, then waits out the rest of the
// phase.
func (h *harness) runOutboxSchedule(ctx context.Context, c *outboxChain) error {
	r := c.res
	t0 := time.Now()
	for _, a := range h.outboxPlan() {
		if !localstack.Sleep(ctx, time.Until(t0.Add(a.at))) {
			return ctx.Err()
		}
		for _, f := range []*fleet{c.producers, c.relays, c.consumers} {
			if p := f.crashed(); p != nil {
				return fmt.Errorf("outbox chain: %s exited on its own: %w\n%s", p.Name, p.ExitErr(), p.TailLog(30))
			}
		}
		switch a.kind {
		case "kill-producer":
			victim := c.producers.killRandom(h.rng)
			if err := c.producers.fillTo(h.o.OutboxProducers); err != nil {
				return err
			}
			r.ProducerKills++
			h.step("outbox chain: kill -9 %s", victim)
		case "kill-relay":
			// Every other kill is of the stream's owner, when one is known.
			victim, what := "", "a standby or the owner"
			if r.RelayKills%2 == 0 {
				if p := ownerRelay(ctx, c.relays); p != nil {
					if victim = c.relays.killPid(p.Pid()); victim != "" {
						what = "the owner"
						r.RelayOwnerKills++
					}
				}
			}
			if victim == "" {
				victim = c.relays.killRandom(h.rng)
			}
			if err := c.relays.fillTo(h.o.OutboxRelays); err != nil {
				return err
			}
			r.RelayKills++
			h.step("outbox chain: kill -9 %s (%s)", victim, what)
		case "kill-outbox-consumer":
			victim, err := killAndReplace(c.consumers, h.o.OutboxConsumers, h.rng)
			if err != nil {
				return err
			}
			r.ConsumerKills++
			h.step("outbox chain: kill -9 %s; %d consumers running", victim, c.consumers.alive())
		case "pg":
			h.step("outbox chain: PostgreSQL: crash (SIGKILL) and restart")
			_ = h.pg.Kill()
			localstack.Sleep(ctx, time.Second)
			if err := h.pg.Start(); err != nil {
				return fmt.Errorf("restarting PostgreSQL: %w", err)
			}
			r.PostgresRestarts++
		case "broker":
			h.step("outbox chain: broker: kill -9 and restart from its data dir")
			if err := h.broker.Restart(ctx, time.Second); err != nil {
				return err
			}
			r.BrokerRestarts++
		}
	}
	localstack.Sleep(ctx, time.Until(t0.Add(h.o.OutboxFor)))
	return ctx.Err()
}

// ownerRelay is the relay whose /metrics says it owns the stream (nil: none
// says so).
func ownerRelay(ctx context.Context, f *fleet) *proc.Process {
	f.mu.Lock()
	f.prune()
	addrs := map[*proc.Process]string{}
	for _, p := range f.running {
		addrs[p] = f.addrs[p]
	}
	f.mu.Unlock()
	for p, addr := range addrs {
		if relayOwns(ctx, addr) {
			return p
		}
	}
	return nil
}

// relayOwns reads idempotent_consumer_outbox_relay_owner from a relay's
// /metrics.
func relayOwns(ctx context.Context, addr string) bool {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "idempotent_consumer_outbox_relay_owner "); ok {
			return strings.TrimSpace(v) == "1"
		}
	}
	return false
}

// waitOutboxApplied waits until every business row's event is applied.
func (h *harness) waitOutboxApplied(ctx context.Context, c *outboxChain, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	missing := int64(-1)
	for time.Now().Before(deadline) {
		for _, f := range []*fleet{c.relays, c.consumers} {
			if p := f.crashed(); p != nil {
				return fmt.Errorf("%s exited on its own: %w\n%s", p.Name, p.ExitErr(), p.TailLog(30))
			}
		}
		if n, err := unappliedOrders(ctx, h.pool); err == nil {
			if missing = n; n == 0 {
				return nil
			}
		}
		if !localstack.Sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
	var b strings.Builder
	for _, f := range []*fleet{c.relays, c.consumers} {
		f.mu.Lock()
		for _, p := range f.running {
			fmt.Fprintf(&b, "\n--- last lines of %s:\n%s", p.Name, p.TailLog(20))
		}
		f.mu.Unlock()
	}
	return fmt.Errorf("%d committed events still not applied after %s%s", missing, timeout, b.String())
}

func unappliedOrders(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxOrdersTable+` o
		WHERE NOT EXISTS (SELECT FROM `+outboxAppliedTable+` a WHERE a.event_id = o.event_id)`).Scan(&n)
	return n, err
}

// outboxConsumerEnv is the outbox topic's consumers: the SQL sink into
// outbox_applied, the id from the CloudEvents ce_id header the relay sends,
// their own dedup table (kept on the real clock).
func outboxConsumerEnv(brokers []string, dbURL string) []string {
	var env []string
	for _, kv := range consumerEnv(brokers, dbURL) {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case envvars.Topic, envvars.Group, envvars.DeadLetterTopic, envvars.SinkSQLStatement, envvars.ClientID:
		default:
			env = append(env, kv)
		}
	}
	return append(env,
		envvars.Topic+"="+outboxTopic,
		envvars.Group+"="+outboxGroup,
		envvars.ClientID+"="+outboxApp,
		envvars.DeadLetterTopic+"="+outboxDLQTopic,
		envvars.TableName+"="+outboxDedupTable,
		envvars.Envelope+"=cloudevents",
		envvars.SinkSQLStatement+"="+outboxApplyStatement,
	)
}

// outboxRelayEnv is the relays' environment: a short poll (a standby tries
// the lock that often) and publish timeout (a new owner waits twice it).
func outboxRelayEnv(brokers []string, dbURL string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		envvars.Brokers + "=" + strings.Join(brokers, ","),
		envvars.DatabaseURL + "=" + dbURL,
		envvars.OutboxTable + "=" + outboxTableName,
		envvars.OutboxPollInterval + "=200ms",
		envvars.OutboxPublishTimeout + "=1s",
		envvars.OutboxBatchSize + "=200",
	}
}

func outboxProducerEnv(dbURL, rollbackFile string, o Options) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"OUTBOX_DATABASE_URL=" + dbURL,
		"OUTBOX_TABLE=" + outboxTableName,
		"OUTBOX_TOPIC=" + outboxTopic,
		"OUTBOX_ORDERS_TABLE=" + outboxOrdersTable,
		"OUTBOX_KEYS=" + strconv.Itoa(o.OutboxKeys),
		"OUTBOX_ROLLBACK_SHARE=" + strconv.FormatFloat(o.OutboxRollbackShare, 'f', -1, 64),
		"OUTBOX_ROLLBACK_FILE=" + rollbackFile,
		"OUTBOX_PAUSE_MAX=" + o.OutboxPauseMax.String(),
	}
}
