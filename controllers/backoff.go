/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// backoff is the per-object exponential wait after a failed reconcile. It
// is returned as RequeueAfter (a failure is status, not an error), so the
// workqueue's own error backoff never applies.
type backoff struct {
	base, max time.Duration
	mu        sync.Mutex
	failures  map[types.NamespacedName]int
}

func newBackoff(base, max time.Duration) *backoff {
	return &backoff{base: base, max: max, failures: map[types.NamespacedName]int{}}
}

// next records a failure and returns the wait before the next attempt:
// base, 2*base, 4*base, ... up to max.
func (b *backoff) next(key types.NamespacedName) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.failures[key]
	b.failures[key] = n + 1
	return backoffDelay(b.base, b.max, n+1)
}

// backoffDelay is the wait after the nth failure in a row (n >= 1): base,
// 2*base, 4*base, ... up to max.
func backoffDelay(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// reset forgets the failures of key.
func (b *backoff) reset(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.failures, key)
}
