package txpipe

import (
	"time"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
)

// Config is what the transactional pipeline needs beyond the partition's
// Deps; one per consumer, shared by its partitions.
type Config struct {
	Handler            event.Handler
	Inserter           *dedup.Inserter
	HandlerMaxAttempts int
	HandlerBackoff     time.Duration
	HandlerBackoffMax  time.Duration
	Calls              *telemetry.Calls
	// AfterDBCommit (a test seam, nil in production) runs after a batch's
	// transaction committed and before its dead letters and offset commit;
	// an error stops Run as a crash would.
	AfterDBCommit func(partition int, next int64) error
}

// env is what the pipeline's code reads: the partition's Deps and the
// pipeline's Config.
type env struct {
	*partition.Deps
	*Config
}

// batcher is one partition under the transactional pipeline.
type batcher struct {
	*partition.Worker
	c     *env
	guard txGuard // batch-transaction safety nets (txguard.go)
}
