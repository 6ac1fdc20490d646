package consumer

import (
	"math/rand/v2"
	"time"
)

// backoff is exponential with full jitter in [d/2, d].
type backoff struct {
	initial, max, cur time.Duration
}

func newBackoff(initial, max time.Duration) *backoff {
	return &backoff{initial: initial, max: max}
}

func (b *backoff) next() time.Duration {
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
	return half + rand.N(half+1)
}

func (b *backoff) reset() { b.cur = 0 }

// backoffAt is the pause before attempt n+1 after n failed attempts: the
// same exponential with full jitter as backoff, computed from the attempt
// count, so that it carries over to a new transaction (handle.go).
func backoffAt(initial, max time.Duration, n int) time.Duration {
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
	return half + rand.N(half+1)
}
