// Package record is one Kafka record on its way through the runtime: the
// Item both pipelines carry from decoding to the outcome that lets its
// offset be committed (its State), and the errors that say a failure is the
// infrastructure's, not the event's (InfraError).
//
// File map:
//   - record.go: Item, State, Decode, StopError, InfraError
package record
