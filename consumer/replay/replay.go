// Package replay holds the contract of a dead-letter replay: what the
// operator's DeadLetterReplay resource hands the replay Job (Spec, as JSON in
// the REPLAY_SPEC variable) and what the Job reports back (Result, as JSON in
// its termination message). It is a leaf: the runtime implements the replay
// (consumer.Replay), the operator only builds a Spec and reads a Result, and
// neither drags the other's dependencies in.
//
// docs/dead-letters.md describes selection, outcomes and parking.
package replay

import (
	"time"

	"github.com/idempotency-dev/operator/consumer/event"
)

// The replay Job's command line and variables.
const (
	// Subcommand of cmd/consumer that runs a replay from EnvSpec.
	Subcommand = "replay"
	// ListSubcommand of cmd/consumer lists dead letters with a selection.
	ListSubcommand = "dead-letters"
	// EnvSpec carries the Spec as JSON.
	EnvSpec = "REPLAY_SPEC"
	// EnvResultFile names the file the Result is written to as JSON
	// (DefaultResultFile when unset): Kubernetes makes it the container's
	// termination message, which the operator reads into the status.
	EnvResultFile     = "REPLAY_RESULT_FILE"
	DefaultResultFile = "/dev/termination-log"
)

// Mode says whether a replay changes anything.
type Mode string

const (
	// ModeDryRun reads and counts the selection; nothing is called,
	// recorded or written.
	ModeDryRun Mode = "DryRun"
	// ModeApply replays the selection through the live pipeline.
	ModeApply Mode = "Apply"
)

// DefaultMaxReplays is how many times a dead letter may be replayed and fail
// again before it is parked.
const DefaultMaxReplays = 3

// Headers a replay adds to a record it writes back to the dead-letter topic.
// The record keeps its original headers, dlq-original-* included (they name
// the original topic, partition and offset, never the dead-letter topic).
const (
	// HeaderReplays counts the replays that failed again (decimal).
	HeaderReplays = "dlq-replays"
	// HeaderParkedReason keeps the reason a parked record had before it
	// was parked (its dlq-reason is then ReasonParked).
	HeaderParkedReason = "dlq-parked-reason"
	// HeaderReplayID names the replay that wrote the record back.
	HeaderReplayID = "dlq-replay-id"
)

// ReasonParked is the dead-letter reason of a record that failed again on
// its last allowed replay. Selections leave it out unless they name it.
const ReasonParked event.Reason = "parked"

// Selection picks dead letters. Every criterion that is set must hold (they
// are ANDed); an empty Selection picks every dead letter but the parked ones.
type Selection struct {
	// Reasons: the record's dlq-reason is one of them. Empty: every reason
	// but ReasonParked.
	Reasons []event.Reason `json:"reasons,omitempty"`
	// DeadLetteredAfter and DeadLetteredBefore bound the record's dlq-time:
	// After <= dlq-time < Before.
	DeadLetteredAfter  *time.Time `json:"deadLetteredAfter,omitempty"`
	DeadLetteredBefore *time.Time `json:"deadLetteredBefore,omitempty"`
	// Partitions: the record's original partition (dlq-original-partition)
	// is one of them, and its original offset within that entry's range.
	Partitions []PartitionRange `json:"partitions,omitempty"`
	// EventIDs: the record's event id (dlq-event-id) is one of them.
	EventIDs []string `json:"eventIds,omitempty"`
	// Key: the record's key equals it (compared as bytes of its UTF-8 text).
	Key *string `json:"key,omitempty"`
	// MaxCount stops the selection after that many records (0: no limit).
	MaxCount int64 `json:"maxCount,omitempty"`
}

// PartitionRange selects original offsets From <= offset <= To of one
// original partition; a nil bound is open.
type PartitionRange struct {
	Partition  int    `json:"partition"`
	FromOffset *int64 `json:"fromOffset,omitempty"`
	ToOffset   *int64 `json:"toOffset,omitempty"`
}

// Spec is one replay.
type Spec struct {
	// ID names the replay's progress in the database (its positions and
	// counts): the same ID resumes, a new ID starts over. The operator uses
	// the DeadLetterReplay's UID. 1 to 64 of [A-Za-z0-9._-].
	ID        string    `json:"id"`
	Mode      Mode      `json:"mode"`
	Selection Selection `json:"selection"`
	// Cutoff: only dead letters written at or before it (dlq-time) are
	// selected, so what a dry run counted is what an apply replays, and
	// what the replay itself writes back is never read again. The operator
	// sets it when the first Job of the object starts; zero means the
	// replay's own start.
	Cutoff time.Time `json:"cutoff,omitzero"`
	// RatePerSecond bounds the replayed records per second (0: no limit).
	RatePerSecond float64 `json:"ratePerSecond,omitempty"`
	// MaxReplays: a record that fails again on this replay and had already
	// been replayed MaxReplays-1 times is parked (0: DefaultMaxReplays).
	MaxReplays int `json:"maxReplays,omitempty"`
	// ReplayOutsideWindow replays records whose event id is outside the
	// dedup window, without dedup protection (else they are skipped).
	ReplayOutsideWindow bool `json:"replayOutsideWindow,omitempty"`
}

// Counts are a replay's outcomes. Selected = Applied + Duplicates + Skipped
// + FailedAgain + Parked once an apply is complete.
type Counts struct {
	Selected    int64 `json:"selected"`
	Applied     int64 `json:"applied"`
	Duplicates  int64 `json:"duplicates"`
	Skipped     int64 `json:"skipped"`
	FailedAgain int64 `json:"failedAgain"`
	Parked      int64 `json:"parked"`
}

// Result is what a replay reports. An apply's counts are durable: a replay
// killed and resumed reports the whole run's counts, not its last part's.
type Result struct {
	ID   string `json:"id"`
	Mode Mode   `json:"mode"`
	Counts
	// ByReason counts the selected records by their dlq-reason.
	ByReason map[event.Reason]int64 `json:"byReason,omitempty"`
	// Complete is true when the whole selection was processed (or, for a
	// dry run, counted).
	Complete bool `json:"complete"`
	// Error is why the replay stopped early.
	Error string `json:"error,omitempty"`
}
