// Package replay is the dead-letter replay engine: it reads the dead-letter
// topic partition by partition with a partition.Worker that has no group
// generation, turns each selected dead letter back into the original event
// (partition.Replay: Decode) and hands it to the live consumer's own
// pipeline (txpipe or extpipe), so a replayed event takes the live path:
// decode, the dedup claim under the live group's scope, the handler or sink
// with the same Idempotency-Key. Its progress (a position per dead-letter
// partition) and its counts are rows of the live group in the positions
// table under a key no Kafka topic can have (contract.PositionsKey), written
// in the same transaction as the effects, so a replay killed at any point
// resumes and applies nothing twice. A record that fails again is written
// back to the dead-letter topic with its headers and a replay count, and
// parked at the limit. A dry run reads and counts only.
//
// File map:
//   - letter.go: a dead letter's headers, the selection, the record written back
//   - engine.go: Run, the apply (workers over the dead-letter partitions)
//   - hooks.go: partition.Replay (Decode, Record, DeadLetter, Committed)
//   - counts.go: the durable counts
//   - scan.go: the dry run and the listing (read only)
package replay
