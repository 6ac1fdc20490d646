package consumer

import "github.com/google/uuid"

// Test seams for the external test package.

// SetAfterDBCommitHook installs fn to run after each batch transaction
// (for external handlers: each recording transaction) commits and before
// its dead letters and offset commit; an error from fn stops Run there, as
// a crash would.
func SetAfterDBCommitHook(c *Consumer, fn func(partition int, next int64) error) {
	c.hooks.afterDBCommit = fn
}

// DisableDedup removes the dedup insert (benchmark baseline).
func DisableDedup(c *Consumer) { c.hooks.disableDedup = true }

// SetBeforeRecordHook installs fn to run, for external handlers, before each
// transaction that records succeeded ids; an error from fn stops Run there,
// as a crash between the calls and their recording would.
func SetBeforeRecordHook(c *Consumer, fn func(partition int, ids []uuid.UUID) error) {
	c.hooks.beforeRecord = fn
}

// PeakInflightBytes is the highest value the inflight_bytes gauge has had.
func PeakInflightBytes(c *Consumer) int64 { return c.mem.Peak() }
