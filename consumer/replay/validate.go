package replay

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idempotency-dev/operator/consumer/event"
)

// MaxIDLength is the longest Spec.ID.
const MaxIDLength = 64

// Validate reports what is wrong with s, every problem in one error.
func (s Spec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("replay spec: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch {
	case s.ID == "":
		bad("id", "must be set (it names the replay's progress: the same id resumes)")
	case len(s.ID) > MaxIDLength:
		bad("id", "%d characters; at most %d", len(s.ID), MaxIDLength)
	default:
		for _, r := range s.ID {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				bad("id", "%q has %q; only [A-Za-z0-9._-] are allowed", s.ID, r)
				break
			}
		}
	}
	switch s.Mode {
	case ModeDryRun, ModeApply:
	default:
		bad("mode", "%q; must be %s or %s", s.Mode, ModeDryRun, ModeApply)
	}
	if s.RatePerSecond < 0 || math.IsNaN(s.RatePerSecond) || math.IsInf(s.RatePerSecond, 0) {
		bad("ratePerSecond", "%v; must be 0 (no limit) or positive", s.RatePerSecond)
	}
	if s.MaxReplays < 0 {
		bad("maxReplays", "%d; must be 0 (the default, %d) or positive", s.MaxReplays, DefaultMaxReplays)
	}
	if !s.Cutoff.IsZero() && s.Cutoff.After(time.Now().Add(time.Minute)) {
		bad("cutoff", "%s is in the future", s.Cutoff.Format(time.RFC3339))
	}
	if err := s.Selection.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Validate reports what is wrong with a selection.
func (sel Selection) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("replay selection: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	for _, r := range sel.Reasons {
		if r == "" {
			bad("reasons", "an empty reason")
		}
	}
	if a, b := sel.DeadLetteredAfter, sel.DeadLetteredBefore; a != nil && b != nil && !a.Before(*b) {
		bad("deadLetteredAfter", "%s is not before deadLetteredBefore %s", a.Format(time.RFC3339), b.Format(time.RFC3339))
	}
	for _, p := range sel.Partitions {
		if p.Partition < 0 {
			bad("partitions", "partition %d is negative", p.Partition)
		}
		if p.FromOffset != nil && p.ToOffset != nil && *p.FromOffset > *p.ToOffset {
			bad("partitions", "partition %d: fromOffset %d is after toOffset %d", p.Partition, *p.FromOffset, *p.ToOffset)
		}
	}
	for _, id := range sel.EventIDs {
		if id == "" {
			bad("eventIds", "an empty event id")
		}
	}
	if sel.MaxCount < 0 {
		bad("maxCount", "%d; must be 0 (no limit) or positive", sel.MaxCount)
	}
	return errors.Join(errs...)
}

// PositionsKey is the topic column under which a replay keeps its progress
// in the positions table of the live group's dedup table (rows of the live
// group, beside the group's own positions, never overwriting them). Kafka
// topic names cannot contain '@' or '/', so no topic's positions can
// collide with it. Its counts are rows keyed PositionsKey + "#" + a count's
// name.
func PositionsKey(deadLetterTopic, id string) string {
	return deadLetterTopic + "@replay/" + id
}

// DeadLetter is one record of the dead-letter topic, as listed for
// inspection (consumer.ListDeadLetters, `consumer dead-letters`).
type DeadLetter struct {
	// Partition and Offset locate it in the dead-letter topic.
	Partition int   `json:"partition"`
	Offset    int64 `json:"offset"`
	// Time is when it was dead-lettered (dlq-time).
	Time   time.Time    `json:"time"`
	Reason event.Reason `json:"reason"`
	// ParkedReason is the reason a parked record last failed with.
	ParkedReason event.Reason `json:"parkedReason,omitempty"`
	EventID      string       `json:"eventId,omitempty"`
	Key          string       `json:"key,omitempty"`
	// The original record.
	OriginalTopic     string `json:"originalTopic"`
	OriginalPartition int    `json:"originalPartition"`
	OriginalOffset    int64  `json:"originalOffset"`
	Group             string `json:"group,omitempty"`
	Attempts          int    `json:"attempts,omitempty"`
	// Replays counts the replays it failed again on; ReplayID names the
	// last one.
	Replays  int    `json:"replays,omitempty"`
	ReplayID string `json:"replayId,omitempty"`
	Error    string `json:"error,omitempty"`
}
