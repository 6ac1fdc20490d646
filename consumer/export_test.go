package consumer

// Test seams for the external test package.

// SetAfterDBCommitHook installs fn to run after each batch transaction
// commits and before its dead letters and offset commit; an error from fn
// stops Run there, as a crash would.
func SetAfterDBCommitHook(c *Consumer, fn func(partition int, next int64) error) {
	c.hooks.afterDBCommit = fn
}

// DisableDedup removes the dedup insert (benchmark baseline).
func DisableDedup(c *Consumer) { c.hooks.disableDedup = true }

// PeakInflightBytes is the highest value the inflight_bytes gauge has had.
func PeakInflightBytes(c *Consumer) int64 { return c.mem.peak.Load() }
