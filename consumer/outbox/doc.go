// Package outbox is the transactional outbox: an insert-only table,
// range-partitioned on a UUID v7 event_id and kept by the dedup partition
// engine, a SQL function that writes one event in the caller's transaction
// (Emit is its Go call), and the Relay that publishes the committed rows to
// Kafka at least once, in commit order per key, with the eventId header.
//
// Files: table.go the table, its cursor table and Ensure; emit.go the SQL
// emit function and Emit; relay.go the Relay (ownership lock, fencing,
// wake-ups); window.go reading a batch by the xid8 horizon; publish.go the
// Kafka writer and error classes; retention.go Maintain and the drop guard;
// metrics.go. docs/outbox.md is the user's page, docs/design.md the
// ordering argument.
package outbox
