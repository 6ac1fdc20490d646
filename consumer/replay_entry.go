package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	ireplay "github.com/idempotency-dev/operator/consumer/internal/replay"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// Replay replays the dead letters of the consumer's dead-letter topic that
// spec selects through the consumer's own pipeline: each one is turned back
// into the original event (value, key, its own headers and traceparent, its
// original topic, partition and offset) and goes through the dedup claim
// under the consumer's group and the handler (or sink) with the same
// Idempotency-Key as live traffic. Nothing is published to the original
// topic. A record that fails again is written back to the dead-letter topic
// with dlq-replays incremented, and parked at spec.MaxReplays.
//
// The replay's progress and counts are kept in the dedup table's positions
// table, under the consumer's group and a key of the replay's own
// (replay.PositionsKey), never in the group's positions or committed
// offsets: the same spec.ID resumes where a stopped or killed run left off,
// and a finished one does nothing and reports the same counts. A DryRun
// reads and counts only. When ctx ends the replay stops at a batch
// boundary; the Result says whether the selection was completed.
//
// The live consumer may run meanwhile (in another process, or from another
// Consumer): an id both meet takes effect once. A Consumer runs once: Run or
// Replay. See docs/dead-letters.md.
func (c *Consumer) Replay(ctx context.Context, spec replay.Spec) (replay.Result, error) {
	res := replay.Result{ID: spec.ID, Mode: spec.Mode}
	if err := spec.Validate(); err != nil {
		return res, err
	}
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return res, errors.New("consumer: a Consumer runs once (Run or Replay)")
	}
	c.running = true
	c.mu.Unlock()
	if err := c.open(ctx); err != nil {
		return res, err
	}
	defer c.close()
	ok, err := c.setup(ctx)
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("consumer: replay %s: stopped while waiting for the database and the topics: %w", spec.ID, context.Cause(ctx))
	}
	res, err = ireplay.Run(ctx, ireplay.Config{
		Spec: spec, Deps: c.partitionDeps(), Pipeline: c.pipeline(), Inserter: c.inserter,
		ShutdownTimeout: c.cfg.ShutdownTimeout, Records: c.metrics.ReplayRecords,
	})
	if err != nil {
		return res, fmt.Errorf("consumer: replay %s: %w", spec.ID, redact.Err(err, c.secrets...))
	}
	return res, nil
}

// ListDeadLetters lists the dead letters of cfg's dead-letter topic that sel
// selects (every criterion; no reason: all but the parked ones; MaxCount
// bounds the list), the partitions in order and each in offset order, with
// no cutoff. It reads the topic only: no database, no consumer group.
func ListDeadLetters(ctx context.Context, cfg Config, sel replay.Selection) ([]replay.DeadLetter, error) {
	if err := sel.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := validTopic(cfg.DeadLetterTopic); err != nil {
		return nil, cfgErr("DeadLetterTopic", "%v", err)
	}
	if len(cfg.Brokers) == 0 {
		return nil, cfgErr("Brokers", "must not be empty")
	}
	cl, err := broker.NewClients(broker.Config{Brokers: cfg.Brokers, ClientID: cfg.ClientID, TLS: cfg.TLS,
		Mechanism: cfg.SASL.Mechanism, Username: cfg.SASL.Username, Password: cfg.SASL.Password})
	if err != nil {
		return nil, cfgErr("SASL", "%v", err)
	}
	secrets := redact.DSNSecrets(cfg.DatabaseURL)
	if cfg.SASL.Password != "" {
		secrets = append(secrets, cfg.SASL.Password)
	}
	return ireplay.List(ctx, cl, cfg.DeadLetterTopic, cfg.Isolation.kafkaLevel(), sel, secrets)
}
