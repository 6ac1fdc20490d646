// Package dedup is the dedup store shared by the operator and the consumer
// runtime: the range-partitioned processed_event table keyed by UUID v7 event
// ids, the pure partition planner, the DDL engine that creates and drops
// partitions without ever blocking inserts, and the batched dedup insert.
//
// The table is partitioned by the event id itself (not by processing time), so
// the primary key, which PostgreSQL enforces per partition, is the dedup key.
// A UUID v7 starts with a big-endian millisecond timestamp and PostgreSQL
// compares uuids bytewise, so a time range is exactly a uuid range; see
// BoundaryUUID. docs/dedup-store.md describes the layout and the maintenance
// protocol.
//
// The package imports only the standard library, pgx and google/uuid, so the
// consumer runtime can use it without pulling in Kubernetes.
package dedup
