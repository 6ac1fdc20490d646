// Package migrate converts an existing, unpartitioned processed-event table
// (the "legacy" table: an event id column, optionally a consumer group and a
// processing time) into the range-partitioned layout of package dedup,
// without losing a dedup record that lies inside the window.
//
// Run renames the legacy table out of the way when the new table takes its
// name (its indexes too, so that the new table's primary key name is free),
// creates the partitioned table and its partitions with dedup.Engine under
// the owner's marker, copies the rows whose ids fall into a partition in
// batches of INSERT ... SELECT ... ON CONFLICT DO NOTHING, and counts and
// reports every row it does not copy (ids that are not UUID v7, older than the
// window, newer than the newest partition) instead of dropping them silently.
// Every step observes the catalog first, so a run is idempotent and an
// interrupted run is finished by running it again. The legacy table is never
// modified beyond its name and never dropped.
//
// docs/migration.md describes the cut-over, with consumers stopped or running.
package migrate
