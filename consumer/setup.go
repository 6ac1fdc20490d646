package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/internal/backoff"
	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/internal/deadletter"
	"github.com/idempotency-dev/operator/consumer/internal/extpipe"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/idempotency-dev/operator/consumer/internal/txpipe"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// open creates the pool and the dead-letter writer.
func (c *Consumer) open(ctx context.Context) error {
	pool := c.cfg.Pool
	if pool == nil {
		pcfg, err := pgxpool.ParseConfig(c.cfg.DatabaseURL)
		if err != nil {
			return cfgErr("DatabaseURL", "cannot be parsed (%s)", redact.Text(err.Error(), c.secrets...))
		}
		pcfg.MaxConns = c.cfg.DatabaseMaxConns
		pcfg.HealthCheckPeriod = 10 * time.Second
		if pcfg.ConnConfig.ConnectTimeout == 0 {
			pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
		}
		if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
			pcfg.ConnConfig.RuntimeParams["application_name"] = c.cfg.ClientID
		}
		// The guard of Decision 6: a transaction of the runtime that waits
		// on anything but PostgreSQL is ended by the server. A setting in
		// the DSN itself wins.
		if t := c.cfg.IdleInTransactionTimeout; t > 0 && pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] == "" &&
			c.cfg.DatabasePooler != PoolerTransaction {
			pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(t.Milliseconds(), 10)
		}
		if c.cfg.DatabasePooler == PoolerTransaction {
			// A transaction pooler hands each transaction to whichever
			// server session is free: a named prepared statement of one
			// would be missing on the next, and it refuses startup
			// parameters it does not track (the idle-in-transaction guard
			// is then the pooler's idle_transaction_timeout). Unnamed
			// statements, each round trip self-contained (Parse, Bind,
			// Execute, Sync), with parameter types described once per
			// connection: typed like the default mode (a SQL sink's
			// payload stays typed by its statement, which the simple
			// protocol would send as a bytea literal).
			pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
			c.log.Info("the database URL reaches PostgreSQL through a transaction pooler: unnamed statements, no session settings")
		}
		pool, err = pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("opening database pool: %w", redact.Err(err, c.secrets...))
		}
	}
	c.mu.Lock()
	c.pool = pool
	c.dlq = deadletter.NewWriter(deadletter.Config{
		Topic: c.cfg.DeadLetterTopic, SourceTopic: c.cfg.Topic, Group: c.cfg.Group, Clients: c.kafka,
		Log: c.log, Dropped: c.metrics.DeadLetterValuesDropped, Secrets: c.secrets,
	})
	c.mu.Unlock()
	return nil
}

func (c *Consumer) close() {
	c.mu.Lock()
	pool, dlq := c.pool, c.dlq
	c.pool = nil
	c.mu.Unlock()
	if dlq != nil {
		_ = dlq.Close()
	}
	if pool != nil && c.cfg.Pool == nil {
		pool.Close()
	}
}

// closeAbandoned is close when partition workers may still run (a handler
// that never returned): their database and dead-letter calls fail from now
// on, and the pool closes once they give back their connections.
func (c *Consumer) closeAbandoned() {
	c.mu.Lock()
	pool, dlq := c.pool, c.dlq
	c.mu.Unlock()
	if dlq != nil {
		_ = dlq.Close()
	}
	if pool != nil && c.cfg.Pool == nil {
		go pool.Close() // waits for the connections in use
	}
}

// setup waits until the database answers, the dedup table and its positions
// table exist, the role may use them (dedup.CheckAccess) and both topics
// exist, reporting not ready meanwhile. It returns
// false if ctx ended, and an error for a table of the other scope, which no
// wait can fix.
func (c *Consumer) setup(ctx context.Context) (bool, error) {
	// The checks are one metadata request and a few catalog queries: every
	// second at most, so a topic created after the consumer (GitOps applies
	// both at once) is consumed within a second or so of appearing, not
	// after a backoff that grew while it was missing.
	bo := backoff.New(backoff.DefaultInitial, min(c.cfg.RetryBackoffMax, time.Second))
	var lastLogged string
	began := time.Now()
	topicAppeared := false // the topic was missing at first
	for {
		err := c.checkDatabase(ctx)
		var se *dedup.ScopeError
		if errors.As(err, &se) {
			return false, fmt.Errorf("consumer: %w", err)
		}
		if err == nil {
			err = c.kafka.CheckTopics(ctx, c.cfg.Topic, c.cfg.DeadLetterTopic)
			if errors.Is(err, broker.ErrTopicMissing) && strings.HasSuffix(err.Error(), ": "+c.cfg.Topic) {
				topicAppeared = true
			}
		}
		if err == nil {
			c.known, err = c.knownPartitions(ctx, topicAppeared)
		}
		if err == nil {
			c.health.OK(telemetry.CompSetup)
			if lastLogged != "" {
				c.log.Info("dependencies ready: joining the group", "waited", time.Since(began).Round(time.Millisecond))
			}
			c.checkDurability(ctx)
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		err = redact.Err(err, c.secrets...)
		c.health.Fail(telemetry.CompSetup, err)
		if err.Error() != lastLogged {
			c.log.Warn("waiting for dependencies", "err", err)
			lastLogged = err.Error()
		}
		if !backoff.Sleep(ctx, bo.Next()) {
			return false, nil
		}
	}
}

func (c *Consumer) checkDatabase(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var exists bool
	name := c.cfg.Table.Schema + "." + c.cfg.Table.Name
	// to_regclass wants a quoted name; the identifiers are validated
	// lower-case [a-z0-9_], which need no quotes.
	if err := c.pool.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
		if strings.Contains(err.Error(), "unsupported startup parameter") {
			return fmt.Errorf("database: %w (a transaction pooler, such as PgBouncer with pool_mode=transaction, refuses the session settings the runtime sends: set CONSUMER_DATABASE_POOLER=transaction, Config.DatabasePooler)", err)
		}
		return fmt.Errorf("database: %w", err)
	}
	if !exists {
		return fmt.Errorf("dedup table %s does not exist (the operator, or dedup.Engine.EnsureTable, creates it)", name)
	}
	if err := dedup.CheckScope(ctx, c.pool, c.cfg.Table); err != nil {
		return err
	}
	if err := c.positions.Check(ctx, c.pool); err != nil {
		return err
	}
	// A role without its grants would fail every batch; the owner may
	// still grant them, so this is a wait, not a terminal error.
	return dedup.CheckAccess(ctx, c.pool, c.cfg.Table, c.cfg.Group, c.handler != nil)
}

// checkDurability reports, in the log and the database_durability_risk
// metric, the ways the database can lose acknowledged commits. The positions
// table makes such a loss redone from Kafka while the topic holds the records.
func (c *Consumer) checkDurability(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := dedup.ReadDurability(ctx, c.pool)
	if err != nil {
		c.log.Info("could not read the database's durability settings", "err", redact.Err(err, c.secrets...))
		return
	}
	risks := d.Risks()
	for _, reason := range []string{dedup.RiskSynchronousCommitOff, dedup.RiskAsyncStandby} {
		c.metrics.DurabilityRisk.WithLabelValues(reason).Set(0)
	}
	for _, r := range risks {
		c.metrics.DurabilityRisk.WithLabelValues(r.Reason).Set(1)
		c.log.Warn("the database can lose acknowledged commits; the positions table makes the consumer redo them from Kafka while the topic still holds the records",
			"reason", r.Reason, "detail", r.Message)
	}
}

// knownPartitions takes what the group has of the topic now: the partitions
// it has a position for, and how many the topic has.
func (c *Consumer) knownPartitions(ctx context.Context, topicAppeared bool) (*partition.KnownPartitions, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	count, err := c.kafka.PartitionCount(ctx, c.cfg.Topic)
	if err != nil {
		return nil, err
	}
	had, err := c.positions.Partitions(ctx, c.pool, c.cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	k := &partition.KnownPartitions{TopicAppeared: topicAppeared, Count: count, Had: map[int]bool{}}
	for _, p := range had {
		k.Had[p] = true
	}
	return k, nil
}

// partitionDeps is what the partition workers share; the pool is open.
func (c *Consumer) partitionDeps() *partition.Deps {
	return &partition.Deps{
		Topic: c.cfg.Topic, Group: c.cfg.Group, StartOffset: c.cfg.StartOffset, DeadLetterTopic: c.cfg.DeadLetterTopic,
		Isolation: c.cfg.Isolation.kafkaLevel(), BatchSize: c.cfg.BatchSize, BatchWait: c.cfg.BatchWait,
		RetryBackoffMax: c.cfg.RetryBackoffMax, Envelope: c.cfg.Envelope, Policies: c.cfg.Policies,
		DisableDedup: c.hooks.disableDedup,
		Log:          c.log, Secrets: c.secrets, Metrics: c.metrics, Health: c.health, Tracing: c.tracing, Mem: c.mem,
		Clients: c.kafka, Pool: c.pool, Positions: c.positions, DeadLetters: c.dlq, Known: c.known,
	}
}

// pipeline is the pipeline that processes each partition: the
// transactional one (txpipe) for a Handler, the external one (extpipe) for
// an ExternalHandler.
func (c *Consumer) pipeline() func(*partition.Worker) {
	if c.external != nil {
		x := extpipe.New(extpipe.Config{
			Handler: c.external, Inserter: c.inserter, Ordering: extpipe.Ordering(c.cfg.Ordering), MaxInFlight: c.cfg.MaxInFlight,
			HandlerMaxAttempts: c.cfg.HandlerMaxAttempts, HandlerBackoff: c.cfg.HandlerBackoff, HandlerBackoffMax: c.cfg.HandlerBackoffMax,
			RetryLaterMax: c.cfg.RetryLaterMax, Calls: c.calls, XM: c.xm, BeforeRecord: c.hooks.beforeRecord,
			AfterRecord: c.hooks.afterDBCommit,
		})
		return func(w *partition.Worker) { extpipe.Run(w, x) }
	}
	t := &txpipe.Config{
		Handler: c.handler, Inserter: c.inserter,
		HandlerMaxAttempts: c.cfg.HandlerMaxAttempts, HandlerBackoff: c.cfg.HandlerBackoff, HandlerBackoffMax: c.cfg.HandlerBackoffMax,
		Calls: c.calls, AfterDBCommit: c.hooks.afterDBCommit,
	}
	return func(w *partition.Worker) { txpipe.Run(w, t) }
}
