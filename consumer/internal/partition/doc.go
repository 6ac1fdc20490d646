// Package partition is one Kafka partition of one group generation: the
// Worker that kafka-go starts for an assignment (Worker.Run). It owns what
// both pipelines share: the partition's reader and its share of the memory
// budget, where the partition starts (Kafka's committed offset, the
// StartOffset policy, or the database's position when the database lost
// committed batches), the position each batch records in the database, the
// offset commit, and the dead letters. A pipeline ([txpipe] or [extpipe])
// processes the records in between; it gets the Worker and the consumer's
// Deps, never the Consumer.
//
// File map:
//   - worker.go: Deps, Worker, Run, Commit, Pause, Decode, DeadLetter
//   - positions.go: the start offset, the database's position, rewinds and
//     records lost to retention
package partition
