package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is exponential with full jitter in [d/2, d].
type Backoff struct {
	initial, max, cur time.Duration
}

// New returns a Backoff from initial doubling up to max.
func New(initial, max time.Duration) *Backoff {
	return &Backoff{initial: initial, max: max}
}

// Next returns the next pause.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.initial
	} else {
		b.cur *= 2
	}
	if b.cur > b.max {
		b.cur = b.max
	}
	if b.cur <= 0 {
		return 0
	}
	half := b.cur / 2
	return half + rand.N(half+1) //nolint:gosec // G404: jitter, not a secret
}

// Reset starts over from the initial pause.
func (b *Backoff) Reset() { b.cur = 0 }

// At is the pause before attempt n+1 after n failed attempts: the
// same exponential with full jitter as Backoff, computed from the attempt
// count, so that it carries over to a new transaction.
func At(initial, max time.Duration, n int) time.Duration {
	cur := initial
	for i := 1; i < n && cur < max; i++ {
		cur *= 2
	}
	if cur > max {
		cur = max
	}
	if cur <= 0 {
		return 0
	}
	half := cur / 2
	return half + rand.N(half+1) //nolint:gosec // G404: jitter, not a secret
}

// Sleep waits d or until ctx is done; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// DefaultInitial is the first pause after a database or broker failure;
// the pauses double up to the consumer's RetryBackoffMax.
const DefaultInitial = 200 * time.Millisecond
