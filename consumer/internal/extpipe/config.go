package extpipe

import (
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
)

// Ordering is which records of one partition may be handled concurrently
// (the consumer's Config.Ordering).
type Ordering string

const (
	OrderingPartition Ordering = "Partition"
	OrderingKey       Ordering = "Key"
	OrderingUnordered Ordering = "Unordered"
)

// maxLookAheadFactor times MaxInFlight is how many records one partition
// holds fetched but not yet durably done.
const maxLookAheadFactor = 4

// Config is what the external pipeline needs beyond the partition's Deps;
// one per consumer, shared by its partitions (New).
type Config struct {
	Handler            event.ExternalHandler
	Inserter           *dedup.Inserter
	Ordering           Ordering
	MaxInFlight        int
	HandlerMaxAttempts int
	HandlerBackoff     time.Duration
	HandlerBackoffMax  time.Duration
	RetryLaterMax      time.Duration
	Calls              *telemetry.Calls
	XM                 *telemetry.ExternalMetrics
	// BeforeRecord (a test seam, nil in production) runs before the
	// transaction that records succeeded ids; an error stops Run there as a
	// crash would.
	BeforeRecord func(partition int, ids []uuid.UUID) error
	// AfterRecord (a test seam, nil in production) runs after a recording
	// transaction committed and before its dead letters and offset commit;
	// an error stops Run there as a crash would.
	AfterRecord func(partition int, next int64) error

	// Slots bounds the calls of all partitions (MaxInFlight) and Claims
	// keeps one id's copies from calling twice across them (New sets both).
	Slots  *slots
	Claims *claims
}

// New completes cfg with the state its partitions share.
func New(cfg Config) *Config {
	cfg.Slots = newSlots(cfg.MaxInFlight)
	cfg.Claims = newClaims()
	return &cfg
}

// env is what the pipeline's code reads: the partition's Deps and the
// pipeline's Config.
type env struct {
	*partition.Deps
	*Config
}

// Run processes the partition under the external handler until the
// generation ends, starting a new session after each rewind.
func Run(w *partition.Worker, cfg *Config) {
	c := &env{Deps: w.D, Config: cfg}
	defer cfg.XM.Oldest.DeleteLabelValues(c.Topic, telemetry.PartLabel(w.Partition))
	for {
		rw := runSession(w, c)
		if rw == nil || !w.Rewind(rw) {
			return
		}
	}
}
