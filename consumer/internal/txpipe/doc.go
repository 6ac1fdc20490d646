// Package txpipe is the transactional pipeline: a partition processed by a
// Handler, batch after batch, each in one PostgreSQL transaction that
// records the partition's position, claims the batch's event ids in the
// dedup table and runs the handler for each new id under a savepoint; then
// the dead letters, then the offset (docs/design.md, Decision 6).
//
// The safety nets live here too: a failed handler attempt is retried after
// a pause taken with no transaction open; a handler that breaks or ends the
// transaction is found out and the transaction redone without it; a server
// that ends a transaction for running too long gets smaller ones.
//
// File map:
//   - config.go: Config, and the batcher that runs one partition
//   - loop.go: Run and collect (how a batch closes)
//   - batch.go: process (one batch to its committed offset) and transact
//     (the step: claim, effect and record in one transaction)
//   - handle.go: one event's handler call, its savepoint and its retries
//   - eventtx.go: the pgx.Tx a handler gets (savepoints pipelined)
//   - txguard.go: transaction size after server timeouts, and the errors
//     that steer a redo
package txpipe
