package event

import (
	"fmt"
	"strings"

	"github.com/idempotency-dev/operator/consumer/envelope"
)

// Reason says why an event was not handled normally. Each has its own Policy
// and its own label value in the dead-letter metric and header.
type Reason = envelope.Reason

// The reasons. The first five come from decoding the envelope.
const (
	ReasonNotJSON          = envelope.ReasonNotJSON
	ReasonMissingID        = envelope.ReasonMissingID
	ReasonInvalidUUID      = envelope.ReasonInvalidUUID
	ReasonWrongUUIDVersion = envelope.ReasonWrongUUIDVersion
	ReasonOversized        = envelope.ReasonOversized
	// ReasonOutsideWindow: the id's timestamp has no partition in the dedup
	// table (older than the retention or beyond the premade partitions), so
	// it can't be deduplicated.
	ReasonOutsideWindow Reason = "outside_window"
	// ReasonHandlerFailed: the handler failed on every attempt, or returned a
	// Permanent error.
	ReasonHandlerFailed Reason = "handler_failed"
)

// Reasons lists every reason, in documentation order.
var Reasons = []Reason{
	ReasonNotJSON, ReasonMissingID, ReasonInvalidUUID, ReasonWrongUUIDVersion,
	ReasonOversized, ReasonOutsideWindow, ReasonHandlerFailed,
}

// Policy is what the runtime does with an event that has a Reason.
type Policy string

const (
	// PolicyDeadLetter writes the event to the dead-letter topic (acks=all),
	// then lets the offset move past it. The default for every reason.
	PolicyDeadLetter Policy = "DeadLetter"
	// PolicySkip logs and counts the event, then lets the offset move past it.
	PolicySkip Policy = "Skip"
	// PolicyStop rolls back the batch and makes Run return an error; the
	// offset does not move past the event.
	PolicyStop Policy = "Stop"
	// PolicyProcess hands the event to the handler without deduplication.
	// Only for ReasonOutsideWindow.
	PolicyProcess Policy = "Process"
)

// ParsePolicy accepts a policy name in any case ("deadletter", "dead-letter",
// "DeadLetter").
func ParsePolicy(s string) (Policy, error) {
	switch strings.ReplaceAll(strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", ""), "_", "") {
	case "deadletter", "dlq":
		return PolicyDeadLetter, nil
	case "skip":
		return PolicySkip, nil
	case "stop":
		return PolicyStop, nil
	case "process":
		return PolicyProcess, nil
	}
	return "", fmt.Errorf("%q is not DeadLetter, Skip, Stop or Process", s)
}
