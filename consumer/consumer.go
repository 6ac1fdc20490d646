package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/internal/deadletter"
	"github.com/idempotency-dev/operator/consumer/internal/membudget"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
)

// shutdownSlack is how long Run waits, once the shutdown timeout is over and
// the handlers' contexts are done, for the partition workers to roll back
// and return; after it Run returns without them (telemetry.Calls.Abandon).
const shutdownSlack = 2 * time.Second

// Consumer consumes one topic in one consumer group with an exactly-once
// effect: see the package documentation.
type Consumer struct {
	cfg      Config
	handler  Handler
	log      *slog.Logger
	metrics  *telemetry.Metrics
	gatherer prometheus.Gatherer
	health   *telemetry.Health
	kafka    *broker.Clients
	secrets  []string
	hooks    hooks
	inserter *dedup.Inserter
	// positions is the group's positions table (partition.Worker keeps it).
	positions *dedup.Positions
	// known is what the group had of the topic when setup passed.
	known *partition.KnownPartitions
	// external is set instead of handler by NewExternal.
	external ExternalHandler
	xm       *telemetry.ExternalMetrics
	// mem is the process-wide memory budget (internal/membudget).
	mem *membudget.Budget
	// tracing starts the batch and handler spans (internal/telemetry).
	tracing *telemetry.Tracing
	// calls are the handler calls running (telemetry.Calls).
	calls *telemetry.Calls

	mu      sync.Mutex
	pool    *pgxpool.Pool
	dlq     *deadletter.Writer
	running bool
}

// hooks are test seams; all nil in production.
type hooks struct {
	// afterDBCommit runs after a batch's transaction committed and before its
	// dead letters and offset commit. An error stops Run as a crash would:
	// nothing more is committed.
	afterDBCommit func(partition int, next int64) error
	// disableDedup skips the dedup insert (benchmark baseline only).
	disableDedup bool
	// beforeRecord runs, for external handlers, before the transaction that
	// records succeeded ids; an error stops Run there as a crash would.
	beforeRecord func(partition int, ids []uuid.UUID) error
}

// New validates cfg and returns a Consumer. It does not connect to anything.
func New(cfg Config, h Handler) (*Consumer, error) {
	if h == nil {
		return nil, cfgErr("Handler", "must not be nil")
	}
	if cfg.Ordering != "" && cfg.Ordering != OrderingPartition {
		// Key lanes for transactional handlers (one short transaction per
		// lane) are left until measured: see docs/design.md, Decision 7.
		return nil, cfgErr("Ordering", "%s is for external handlers (NewExternal); a transactional handler processes a partition in offset order (Partition)", cfg.Ordering)
	}
	return newConsumer(cfg, h)
}

// newConsumer is New and NewExternal's common part; h is nil for an external
// handler.
func newConsumer(cfg Config, h Handler) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Consumer{cfg: cfg, handler: h, calls: telemetry.NewCalls()}
	c.secrets = append(c.secrets, redact.DSNSecrets(cfg.DatabaseURL)...)
	if cfg.SASL.Password != "" {
		c.secrets = append(c.secrets, cfg.SASL.Password)
	}
	c.log = slog.New(redact.Handler(cfg.Logger.Handler(), c.secrets...)).With(
		"topic", cfg.Topic, "group", cfg.Group)

	reg := cfg.Registerer
	c.gatherer = cfg.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, c.gatherer = r, r
	} else if c.gatherer == nil {
		if g, ok := reg.(prometheus.Gatherer); ok {
			c.gatherer = g
		} else {
			c.gatherer = prometheus.DefaultGatherer
		}
	}
	m, err := telemetry.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	c.metrics = m
	if c.xm, err = telemetry.NewExternalMetrics(reg); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	if c.mem, err = membudget.New(cfg.MemoryBudget, reg); err != nil {
		return nil, err
	}
	c.health = telemetry.NewHealth(func(ready bool) {
		if ready {
			m.Ready.Set(1)
		} else {
			m.Ready.Set(0)
		}
	})
	c.kafka, err = broker.NewClients(broker.Config{Brokers: cfg.Brokers, ClientID: cfg.ClientID, TLS: cfg.TLS,
		Mechanism: cfg.SASL.Mechanism, Username: cfg.SASL.Username, Password: cfg.SASL.Password})
	if err != nil {
		return nil, cfgErr("SASL", "%v", err)
	}
	c.tracing = telemetry.NewTracing(cfg.TracerProvider, cfg.Topic, cfg.Group)
	c.inserter, err = dedup.NewInserter(cfg.Table, cfg.Group)
	if err != nil {
		return nil, cfgErr("Table", "%v", err)
	}
	c.positions, err = dedup.NewPositions(cfg.Table, cfg.Group)
	if err != nil {
		return nil, cfgErr("Table", "%v", err)
	}
	return c, nil
}

// Run validates cfg, then consumes until ctx is done or an event's reason has
// PolicyStop. See Consumer.Run.
func Run(ctx context.Context, cfg Config, h Handler) error {
	c, err := New(cfg, h)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Run consumes until ctx is done, then shuts down gracefully: batches in
// flight finish and commit (for at most ShutdownTimeout), and the member
// leaves the group so its partitions move at once. It returns nil after a
// graceful shutdown, and an error wrapping ErrStopped when an event's reason
// has PolicyStop. Database and broker outages never make it return: it pauses,
// reports not ready and retries.
//
// A Consumer runs once.
func (c *Consumer) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("consumer: Run called twice")
	}
	c.running = true
	c.mu.Unlock()

	// runCtx ends on shutdown or on a fatal error; hardCtx, which database
	// and handler calls use, ends only when the shutdown grace period is over.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	hardCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	// overdue is closed shutdownSlack after the shutdown timeout: Run then
	// stops waiting for partition workers whose handlers do not return.
	overdue, runDone := make(chan struct{}), make(chan struct{})
	defer close(runDone)
	go func() {
		select {
		case <-runCtx.Done():
		case <-hardCtx.Done():
			return
		}
		c.health.SetStopping(true)
		t := time.NewTimer(c.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			c.log.Warn("shutdown timeout: abandoning batches in flight", "timeout", c.cfg.ShutdownTimeout)
			hardStop()
		case <-hardCtx.Done():
			return
		}
		t.Reset(shutdownSlack)
		select {
		case <-t.C:
			close(overdue)
		case <-runDone:
		}
	}()

	c.health.SetRunning(true)
	defer c.health.SetRunning(false)
	c.log.Info("consumer starting", "config", c.cfg)

	if err := c.open(hardCtx); err != nil {
		return err
	}
	abandoned := false
	defer func() {
		if abandoned {
			c.closeAbandoned()
			return
		}
		c.close()
	}()

	if ok, err := c.setup(runCtx); err != nil {
		return err
	} else if !ok {
		return c.result(runCtx)
	}

	startOffset := kafka.FirstOffset
	if c.cfg.StartOffset == StartLatest {
		startOffset = kafka.LastOffset
	}
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                c.cfg.Group,
		Brokers:           c.cfg.Brokers,
		Dialer:            c.kafka.Dialer,
		Topics:            []string{c.cfg.Topic},
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		SessionTimeout:    c.cfg.SessionTimeout,
		RebalanceTimeout:  c.cfg.RebalanceTimeout,
		JoinGroupBackoff:  time.Second,
		// The member goes on heartbeating while its partitions drain (a
		// batch finishing, a handler's retry pause waited out), so their
		// last commits are still the generation's, however long that takes
		// compared to SessionTimeout. Our patch: third_party/kafka-go/PATCH.md.
		DrainTimeout: c.cfg.ShutdownTimeout,
		StartOffset:  startOffset,
		// Kafka watches partition counts for us only if asked.
		WatchPartitionChanges:  true,
		PartitionWatchInterval: 5 * time.Second, // a partition added to the topic is consumed within seconds
		Timeout:                10 * time.Second,
		Logger:                 broker.Logger{Log: c.log, Level: slog.LevelDebug - 4},
		ErrorLogger:            broker.Logger{Log: c.log, Level: slog.LevelDebug},
	})
	if err != nil {
		return fmt.Errorf("creating consumer group: %w", err)
	}
	// Closing the group ends the current generation, waits for the partition
	// workers (they finish and commit their batch, the member heartbeating
	// meanwhile) and leaves the group.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-runCtx.Done()
		c.log.Info("leaving consumer group")
		_ = group.Close()
	}()

	deps, pipeline := c.partitionDeps(), c.pipeline()
	var groupErrAt time.Time
	for {
		gen, err := group.Next(runCtx)
		if err != nil {
			if errors.Is(err, kafka.ErrGroupClosed) || runCtx.Err() != nil {
				break
			}
			c.health.SetJoined(false)
			c.metrics.InfraErrors.WithLabelValues(telemetry.CompGroup).Inc()
			err = redact.Err(err, c.secrets...)
			if c.health.Fail(telemetry.CompGroup, err) || time.Since(groupErrAt) > 30*time.Second {
				c.log.Warn("joining the consumer group failed; retrying", "err", err)
				groupErrAt = time.Now()
			}
			continue
		}
		if d := c.health.OK(telemetry.CompGroup); d > 0 {
			c.log.Info("consumer group reachable again", "outage", d.Round(time.Millisecond))
		}
		c.health.SetJoined(true)
		c.metrics.Rebalances.Inc()
		assigned := gen.Assignments[c.cfg.Topic]
		c.metrics.Assigned.Set(float64(len(assigned)))
		parts := make([]int, len(assigned))
		for i, a := range assigned {
			parts[i] = a.ID
		}
		c.log.Info("joined generation", "generation", gen.ID, "member", gen.MemberID, "partitions", parts)
		for _, a := range assigned {
			w := &partition.Worker{D: deps, Gen: gen, Partition: a.ID, Offset: a.Offset, HardCtx: hardCtx, Fatal: stopRun, RunCtx: runCtx}
			gen.Start(func(genCtx context.Context) { w.Run(genCtx, pipeline) })
		}
	}
	select {
	case <-closed:
	case <-overdue:
		// Handlers that ignore their context keep their partition workers,
		// and so the group's Close, from returning: give them up. Whatever
		// they do when they return is rolled back (their context is done),
		// and the member leaves the group by its session timeout once its
		// heartbeats stop (DrainTimeout, ShutdownTimeout after the start).
		abandoned = true
		n := c.calls.Abandon(c.log)
		c.log.Warn("shutdown: stopped waiting for partition workers after the shutdown timeout; nothing they hold is recorded or committed",
			"handlerCalls", n, "timeout", c.cfg.ShutdownTimeout)
	}
	c.health.SetJoined(false)
	c.log.Info("consumer stopped")
	return c.result(runCtx)
}

// result is Run's return value once runCtx is done.
func (c *Consumer) result(runCtx context.Context) error {
	cause := context.Cause(runCtx)
	if cause == nil || errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		return nil
	}
	return cause
}

// SetMemoryBudget follows a new memory budget while the Consumer runs (an
// in-place resize of its container): the batches' half takes it at once
// (after a shrink, records wait until what is held fits), the readers with
// the next rebalance's plans. It changes nothing for a Consumer created
// without a budget (Config.MemoryBudget 0), and budget 0 does not lift one.
// Safe for concurrent use.
func (c *Consumer) SetMemoryBudget(budget int64) {
	c.mem.Resize(budget)
}
