package main

import (
	"strings"
	"testing"

	"github.com/idempotency-dev/operator/consumer/replay"
)

// violationCase breaks one invariant of a clean Result.
type violationCase struct {
	name string
	mod  func(*Result)
	want string // in the violations
}

// testViolations checks that clean passes and that each case fails it with
// its message.
func testViolations(t *testing.T, clean Result, violations func(*Result) []string, cases []violationCase) {
	t.Helper()
	if v := violations(&clean); len(v) != 0 {
		t.Fatalf("clean run: %v", v)
	}
	for _, tc := range cases {
		r := clean
		tc.mod(&r)
		if v := strings.Join(violations(&r), "; "); !strings.Contains(v, tc.want) {
			t.Errorf("%s: violations %q, want %q", tc.name, v, tc.want)
		}
	}
}

// Each invariant of the SQL group fails a run on its own, and a clean run
// passes: the table of invariants in Violations names every one.
func TestViolations(t *testing.T) {
	clean := Result{LagZero: true, Messages: 12, Unique: 10, Applied: 10, Snapshots: 3, LogsChecked: 4, TxSampled: true}
	testViolations(t, clean, (*Result).Violations, []violationCase{
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
	})
}

// The HTTP checks fail a run with a missing id or a second dedup row, and
// pass a clean one.
func TestHTTPViolations(t *testing.T) {
	clean := Result{HTTPConsumers: 1, ProviderRequests: 10, HTTPRecorded: 9, HTTPDedupRowsPerIDMax: 1, ProviderRequestsPerIDMax: 3, HTTPSnapshots: 5}
	testViolations(t, clean, (*Result).httpViolations, []violationCase{
		{"missing", func(r *Result) { r.ProviderMissing = 1 }, "never reached the provider"},
		{"retryable dead-lettered", func(r *Result) { r.DeadLetteredRetryable = 2 }, "2 events dead-lettered after a retryable answer"},
		{"two rows", func(r *Result) { r.HTTPDedupRowsPerIDMax = 2 }, "2 dedup rows"},
		{"no key", func(r *Result) { r.ProviderNoKey = 1 }, "without an Idempotency-Key"},
		{"aborted", func(r *Result) { r.ProviderAborted = 1 }, "aborted transactions"},
		{"recorded uncalled", func(r *Result) { r.HTTPRecordedNotCalled = 1 }, "recorded without a call"},
		{"unrecorded", func(r *Result) { r.HTTPUnrecorded = 1 }, "neither recorded nor dead-lettered"},
		{"nothing", func(r *Result) { r.ProviderRequests = 0 }, "nothing to check"},
		{"malformed", func(r *Result) { r.HTTPMalformedMissing = 1 }, "malformed messages missing"},
		{"offsets", func(r *Result) { r.HTTPOffsetViolations = []string{"partition 0: offset 3 committed past"} }, "HTTP group: partition 0"},
	})
}

// Each invariant of the replay phase fails a run on its own, and a clean
// replay passes; a Result with a replay phase carries its violations.
func TestReplayViolations(t *testing.T) {
	done := replay.Result{Complete: true, Counts: replay.Counts{Selected: 10, Applied: 6, Duplicates: 2, Parked: 2}}
	clean := ReplayResult{WantKills: 3, Kills: 3, DeadLetters: 10, FixableLetters: 8, FixableIDs: 6, BrokenLetters: 2,
		Dry: replay.Result{Complete: true, Counts: replay.Counts{Selected: 10}}, Apply: done}
	if v := clean.Violations(); len(v) != 0 {
		t.Fatalf("clean replay: %v", v)
	}
	for _, tc := range []struct {
		name string
		mod  func(*ReplayResult)
		want string
	}{
		{"nothing", func(r *ReplayResult) { r.FixableLetters = 0 }, "nothing was dead-lettered for the bug"},
		{"other", func(r *ReplayResult) { r.OtherFailed = 1 }, "outside the bug's buckets"},
		{"early", func(r *ReplayResult) { r.AppliedBeforeFix = 1 }, "before the fix"},
		{"dry counts", func(r *ReplayResult) { r.Dry.Counts.Selected = 9 }, "dry run"},
		{"dry effects", func(r *ReplayResult) { r.DryRunEffects = 1 }, "the dry run changed"},
		{"incomplete", func(r *ReplayResult) { r.Apply.Complete = false }, "did not complete"},
		{"counts", func(r *ReplayResult) { r.Apply.Duplicates, r.Apply.Parked = 3, 1 }, "the replay's counts"},
		{"kills", func(r *ReplayResult) { r.Kills = 2 }, "fewer than 3"},
		{"lost", func(r *ReplayResult) { r.Lost = 1 }, "neither took effect nor were parked"},
		{"twice", func(r *ReplayResult) { r.DuplicatesApplied = 1 }, "1 duplicate applications"},
		{"unexpected", func(r *ReplayResult) { r.Unexpected = 1 }, "should not have"},
		{"amount", func(r *ReplayResult) { r.WrongAmount = 1 }, "wrong amount"},
	} {
		r := clean
		tc.mod(&r)
		if v := strings.Join(r.Violations(), "; "); !strings.Contains(v, tc.want) {
			t.Errorf("%s: violations %q, want %q", tc.name, v, tc.want)
		}
	}
	r := Result{LagZero: true, Messages: 12, Unique: 10, Applied: 10, Snapshots: 3, LogsChecked: 4, TxSampled: true,
		Replay: &ReplayResult{WantKills: 3}}
	if v := strings.Join(r.Violations(), "; "); !strings.Contains(v, "replay: ") {
		t.Fatalf("a failed replay phase does not fail the run: %q", v)
	}
	var b strings.Builder
	clean.Print(&b)
	if !strings.Contains(b.String(), "RESULT replay dead_letters=10 applied=6 duplicates=2 parked=2 kills=3 lost=0 duplicates_applied=0\n") {
		t.Fatalf("printed %q", b.String())
	}
}

// Each invariant of the claim clients' group fails a run on its own, a clean
// one passes, a Result with the group carries its violations, and the RESULT
// line has its keys after the existing ones.
func TestClaimViolations(t *testing.T) {
	clean := Result{ClaimClients: 2, ClaimKills: 4, ClaimKillsAfterCommit: 2, ClaimApplied: 10, ClaimSnapshots: 5}
	testViolations(t, clean, (*Result).claimViolations, []violationCase{
		{"nothing", func(r *Result) { r.ClaimApplied = 0 }, "claim group: no id was applied"},
		{"duplicate", func(r *Result) { r.ClaimDuplicatesApplied = 1 }, "claim group: 1 duplicate applications"},
		{"lost", func(r *Result) { r.ClaimLost = 2 }, "claim group: 2 valid ids lost"},
		{"aborted", func(r *Result) { r.ClaimAbortedApplied = 1 }, "records of aborted transactions"},
		{"unknown", func(r *Result) { r.ClaimUnknownApplied = 1 }, "ids never produced"},
		{"amount", func(r *Result) { r.ClaimWrongAmount = 1 }, "wrong amount"},
		{"claim without effect", func(r *Result) { r.ClaimedNotApplied = 1 }, "claimed without their ledger row"},
		{"effect without claim", func(r *Result) { r.ClaimAppliedNotClaimed = 1 }, "applied without their claim"},
		{"snapshots", func(r *Result) { r.ClaimSnapshots = 0 }, "claim group: no committed-offset snapshot"},
		{"offsets", func(r *Result) { r.ClaimOffsetViolations = []string{"partition 2: offset 7 committed past"} }, "claim group: partition 2: offset 7"},
	})
	r := Result{LagZero: true, Messages: 12, Unique: 10, Applied: 10, Snapshots: 3, LogsChecked: 4, TxSampled: true, ClaimClients: 2}
	if v := strings.Join(r.Violations(), "; "); !strings.Contains(v, "claim group: no id was applied") {
		t.Fatalf("a failed claim group does not fail the run: %q", v)
	}
	r.ClaimApplied, r.ClaimSnapshots, r.ClaimKills, r.ClaimKillsAfterCommit, r.ClaimDuplicatesApplied = 10, 3, 4, 2, 1
	r.Pooler = true
	var b strings.Builder
	r.Print(&b)
	if !strings.Contains(b.String(), "RESULT pooler=pgbouncer-transaction events=12 unique=10 applied=10 duplicates_applied=0 lost=0 ") ||
		!strings.Contains(b.String(), " offset_violations=0 claim_kills=4 claim_kills_after_commit=2 claim_applied=10 claim_lost=0 claim_duplicates_applied=1 claim_offset_violations=0 max_tx_open_ms=") {
		t.Fatalf("printed %q", b.String())
	}
}
