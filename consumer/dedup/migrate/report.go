package migrate

import (
	"fmt"
	"io"
	"strings"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// Reasons a legacy row is not copied, as in Report.Skipped and the CSV.
const (
	SkipNotV7  = "not_uuid_v7"       // null, or not version 7 with the RFC 9562 variant
	SkipTooOld = "older_than_window" // stamped before the oldest partition
	SkipTooNew = "newer_than_window" // stamped at or after the newest partition's end
	SkipInGap  = "in_partition_gap"  // between partitions (a foreign partition left a hole)
)

// Report says what Run did (or, with DryRun, would do).
type Report struct {
	DryRun bool
	// Source is the legacy table read (schema.name, after any rename).
	Source string
	// Renamed is set when the legacy table was renamed from the new
	// table's name to Source in this run; RenamedIndexes lists "old -> new".
	Renamed        bool
	RenamedIndexes []string
	// Target is the partitioned table; Created is set when this run created
	// it, PartitionsCreated lists the partitions this run created.
	Target            string
	Created           bool
	PartitionsCreated []string
	// Window is the range of producer times the partitions cover.
	Window dedup.Window
	// Rows is the number of legacy rows; Eligible of them are UUID v7 ids
	// inside a partition, and are (or would be) in the new table.
	Rows     int64
	Eligible int64
	// Copied were inserted by this run; the other eligible rows were there
	// already (an earlier run, the sync trigger, or the consumers).
	Copied int64
	// Skipped counts the rows not copied, by reason (Skip*); Samples lists
	// a few of their ids.
	Skipped map[string]int64
	Samples map[string][]string
	// Missing is the number of eligible rows not found in the new table
	// after the copy (verification; always 0 unless partitions were dropped
	// meanwhile). Not computed in a dry run.
	Missing int64
	// SyncTrigger names the trigger installed on the legacy table, if any.
	SyncTrigger string
	// LeftoverSyncTrigger names the trigger an earlier run installed,
	// found on the legacy table by a run without SyncTrigger: it still
	// copies every legacy insert until RemoveSyncTrigger.
	LeftoverSyncTrigger string
	// PartitionsDropped lists the partitions this run dropped (or, in a
	// dry run, would drop): their ranges are older than the retention.
	PartitionsDropped []string
	// Interrupted is set when the copy stopped before the end (the context
	// was cancelled, or a batch failed). Copied then counts the batches
	// committed before, and Missing, when Counted, what is still missing.
	Interrupted bool
	// Counted is set when Missing was counted (after a finished copy, or
	// after an interruption if the count itself succeeded).
	Counted bool
}

// SkippedTotal is the number of legacy rows not copied.
func (r *Report) SkippedTotal() int64 {
	var n int64
	for _, v := range r.Skipped {
		n += v
	}
	return n
}

// Write prints the report for people.
func (r *Report) Write(w io.Writer) {
	verb := func(done, would string) string {
		if r.DryRun {
			return would
		}
		return done
	}
	if r.DryRun {
		fmt.Fprintln(w, "dry run: nothing was changed")
	}
	if r.Interrupted {
		fmt.Fprintln(w, "INTERRUPTED: the copy did not finish; the counts below are what the new table holds now; run again to finish")
	}
	if r.Renamed {
		fmt.Fprintf(w, "legacy table %s to %s\n", verb("renamed", "would be renamed"), r.Source)
		for _, ix := range r.RenamedIndexes {
			fmt.Fprintf(w, "  index %s\n", ix)
		}
	} else {
		fmt.Fprintf(w, "legacy table: %s\n", r.Source)
	}
	switch {
	case r.Created:
		fmt.Fprintf(w, "partitioned table %s %s\n", r.Target, verb("created", "would be created"))
	default:
		fmt.Fprintf(w, "partitioned table %s exists\n", r.Target)
	}
	if len(r.PartitionsCreated) > 0 {
		fmt.Fprintf(w, "partitions %s: %d (%s .. %s)\n", verb("created", "to create"), len(r.PartitionsCreated),
			r.PartitionsCreated[0], r.PartitionsCreated[len(r.PartitionsCreated)-1])
	}
	if len(r.PartitionsDropped) > 0 {
		fmt.Fprintf(w, "partitions %s (older than the retention): %d (%s .. %s)\n", verb("dropped", "to drop"), len(r.PartitionsDropped),
			r.PartitionsDropped[0], r.PartitionsDropped[len(r.PartitionsDropped)-1])
	}
	fmt.Fprintf(w, "dedup window: %s\n", r.Window)
	fmt.Fprintf(w, "legacy rows: %d\n", r.Rows)
	switch {
	case r.DryRun:
		fmt.Fprintf(w, "  inside the window: %d (copied unless present already)\n", r.Eligible)
	case r.Interrupted && r.Counted:
		fmt.Fprintf(w, "  inside the window: %d (in %s now: %d; copied by this run: %d; still missing: %d)\n",
			r.Eligible, r.Target, r.Eligible-r.Missing, r.Copied, r.Missing)
	case r.Interrupted:
		fmt.Fprintf(w, "  inside the window: %d (copied by this run before the interruption: %d; what %s holds now could not be counted)\n",
			r.Eligible, r.Copied, r.Target)
	default:
		fmt.Fprintf(w, "  inside the window: %d (copied now %d, present already %d)\n", r.Eligible, r.Copied, r.Eligible-r.Copied)
	}
	fmt.Fprintf(w, "  not copied: %d\n", r.SkippedTotal())
	for _, k := range []string{SkipNotV7, SkipTooOld, SkipTooNew, SkipInGap} {
		if n := r.Skipped[k]; n > 0 {
			fmt.Fprintf(w, "    %s: %d, e.g. %s\n", k, n, strings.Join(r.Samples[k], ", "))
		}
	}
	if !r.DryRun && !r.Interrupted && r.Counted {
		fmt.Fprintf(w, "verification: %d eligible rows missing from %s\n", r.Missing, r.Target)
	}
	if r.SyncTrigger != "" {
		fmt.Fprintf(w, "sync trigger %s on %s %s: new legacy rows are copied too until it is removed\n",
			r.SyncTrigger, r.Source, verb("installed", "would be installed"))
	}
	if r.LeftoverSyncTrigger != "" {
		fmt.Fprintf(w, "sync trigger %s of an earlier run is still installed on %s: it copies every legacy insert; remove it with --remove-sync-trigger once nothing writes the legacy table\n",
			r.LeftoverSyncTrigger, r.Source)
	}
}
