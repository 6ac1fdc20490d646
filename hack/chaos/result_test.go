package main

import (
	"strings"
	"testing"
)

// Each invariant of the SQL group fails a run on its own, and a clean run
// passes: the table of invariants in Violations names every one.
func TestViolations(t *testing.T) {
	clean := Result{LagZero: true, Messages: 12, Unique: 10, Applied: 10, Snapshots: 3, LogsChecked: 4, TxSampled: true}
	if v := clean.Violations(); len(v) != 0 {
		t.Fatalf("clean run: %v", v)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Result)
		want string
	}{
		{"lag", func(r *Result) { r.LagZero = false }, "lag did not reach zero"},
		{"nothing", func(r *Result) { r.Messages = 0 }, "nothing was produced"},
		{"duplicate", func(r *Result) { r.DuplicatesApplied = 1 }, "1 duplicate applications"},
		{"lost", func(r *Result) { r.Applied, r.Lost = 9, 1 }, "1 valid ids lost"},
		{"outside", func(r *Result) { r.Applied, r.OutsideWindow = 9, 1 }, "outside the dedup window"},
		{"aborted", func(r *Result) { r.AbortedApplied = 2 }, "2 records of aborted transactions"},
		{"foreign", func(r *Result) { r.ForeignDeadLetters = 1 }, "hold no data record"},
		{"unknown", func(r *Result) { r.UnknownApplied = 1 }, "ids never produced"},
		{"amount", func(r *Result) { r.WrongAmount = 1 }, "wrong amount"},
		{"malformed missing", func(r *Result) { r.MalformedMissing = 1 }, "1 missing from the dead-letter topic"},
		{"malformed wrong", func(r *Result) { r.MalformedWrong = 1 }, "1 with the wrong reason"},
		{"accounting", func(r *Result) { r.Applied = 9 }, "accounting: applied 9"},
		{"snapshots", func(r *Result) { r.Snapshots = 0 }, "no committed-offset snapshot"},
		{"logs", func(r *Result) { r.LogsChecked = 0 }, "no log file was checked"},
		{"leak", func(r *Result) { r.SecretLeaks = []string{"consumer-3.log"} }, "appears in logs: consumer-3.log"},
		{"tx", func(r *Result) { r.TxSampled = false }, "max_tx_open_ms unknown"},
		{"offsets", func(r *Result) { r.OffsetViolations = []string{"partition 1: offset 9 committed past"} }, "partition 1: offset 9"},
		{"partitions", func(r *Result) { r.PartitionProblems = []string{"planned partition missing: p1"} }, "planned partition missing"},
		{"http group", func(r *Result) { r.HTTPConsumers = 1 }, "HTTP group: the provider got 0 requests"},
	} {
		r := clean
		tc.mod(&r)
		if v := strings.Join(r.Violations(), "; "); !strings.Contains(v, tc.want) {
			t.Errorf("%s: violations %q, want %q", tc.name, v, tc.want)
		}
	}
}
