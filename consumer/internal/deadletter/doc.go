// Package deadletter writes dead letters: the record as it came, with the
// dlq-* headers saying why and where from, to the dead-letter topic with
// acks=all, in produce batches that fit the topic's max.message.bytes (read
// from the cluster, and read again when the broker refuses a batch); a
// record that alone exceeds it loses its value, then its key and headers,
// and says so.
//
// File map:
//   - writer.go: Writer, Message, Write and the limit it sizes batches to
//   - fit.go: fitting one record to the limit, and its size as kafka-go counts it
package deadletter
