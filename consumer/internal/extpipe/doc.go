// Package extpipe is the external pipeline: a partition processed by an
// ExternalHandler, whose effects are outside PostgreSQL (an HTTP call). Per
// partition, records are fetched into a window, their ids looked up in one
// lock-free SELECT, the handler called for the new ones (concurrently as
// the Ordering allows, at most MaxInFlight calls across the process, with
// no transaction open), the succeeded ids recorded with the partition's
// position in one short transaction, the failed ones dead-lettered, and the
// offset committed up to the contiguous prefix of records that are durably
// done (docs/design.md, Decision 6).
//
// File map:
//   - config.go: Config, New and Run (a session after each rewind)
//   - session.go: one session's window and its loop
//   - lookup.go: decoding into the window and the id lookup
//   - ready.go: a record's way to its call: lanes, claims, taking over
//   - call.go: the handler call with its retries and pauses
//   - recorder.go: the recording job (ids, dead letters, offset)
//   - claims.go: one id's copies across partitions call once
//   - lanes.go: the Ordering's lanes and the MaxInFlight slots
package extpipe
