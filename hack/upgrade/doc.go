// Package upgrade holds the upgrade test from a real older build (make
// test-upgrade): it builds cmd/manager and cmd/consumer from the latest
// release tag (or, before the first one, the pinned commit
// DefaultFrom) in a git worktree, runs them against a real API server
// (envtest) and PostgreSQL under traffic, replaces them with this tree's
// builds, and rolls back again. See docs/upgrade.md, "The upgrade test".
package upgrade

// DefaultFrom is the commit the upgrade test starts from while no release
// tag exists: the state before the round of changes that the test was
// written for, so that it spans every change made since.
const DefaultFrom = "af2c676"
