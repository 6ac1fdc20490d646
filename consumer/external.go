package consumer

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Ordering is which records of one partition may be handled concurrently.
type Ordering string

const (
	// OrderingPartition handles one record of a partition at a time, in
	// offset order. The only ordering of transactional handlers.
	OrderingPartition Ordering = "Partition"
	// OrderingKey handles records with different Kafka keys concurrently and
	// records with the same key one at a time in offset order. Records with
	// no key (nil or empty) share one key. The default of external handlers.
	OrderingKey Ordering = "Key"
	// OrderingUnordered handles any records concurrently.
	OrderingUnordered Ordering = "Unordered"
)

// Defaults of the processing model.
const (
	DefaultMaxInFlight              = 64
	DefaultIdleInTransactionTimeout = 5 * time.Second
)

// ParseOrdering accepts an ordering name in any case.
func ParseOrdering(s string) (Ordering, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "partition":
		return OrderingPartition, nil
	case "key":
		return OrderingKey, nil
	case "unordered", "none":
		return OrderingUnordered, nil
	}
	return "", fmt.Errorf("%q is not Partition, Key or Unordered", s)
}

// validateConcurrency checks the processing-model fields (after defaults).
func (c Config) validateConcurrency() error {
	switch c.Ordering {
	case "", OrderingPartition, OrderingKey, OrderingUnordered:
	default:
		return cfgErr("Ordering", "%q is not Partition, Key or Unordered", c.Ordering)
	}
	if c.MaxInFlight < 0 || c.MaxInFlight > 10000 {
		return cfgErr("MaxInFlight", "%d is not between 1 and 10000", c.MaxInFlight)
	}
	if c.IdleInTransactionTimeout > 0 && c.IdleInTransactionTimeout < 100*time.Millisecond {
		return cfgErr("IdleInTransactionTimeout", "%v is below 100ms (a negative value leaves the server's setting)", c.IdleInTransactionTimeout)
	}
	return nil
}

// NewExternal validates cfg and returns a Consumer for a handler whose
// effects are outside the database (see ExternalHandler). Ordering defaults
// to OrderingKey and MaxInFlight to 64. It does not connect to anything.
func NewExternal(cfg Config, h ExternalHandler) (*Consumer, error) {
	if h == nil {
		return nil, cfgErr("Handler", "must not be nil")
	}
	if cfg.Ordering == "" {
		cfg.Ordering = OrderingKey
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	c, err := newConsumer(cfg, nil)
	if err != nil {
		return nil, err
	}
	c.external = h
	return c, nil
}

// RunExternal validates cfg, then consumes with an external handler until
// ctx is done or an event's reason has PolicyStop. See Consumer.Run.
func RunExternal(ctx context.Context, cfg Config, h ExternalHandler) error {
	c, err := NewExternal(cfg, h)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
