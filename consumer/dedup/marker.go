package dedup

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// markerVersion is the layout version written into new markers.
const markerVersion = 1

// Marker is the ownership marker stored as the table's COMMENT, as JSON, e.g.
// {"idempotency.dev/owner":"<uid>","scope":"Global","interval":"Daily","version":1}.
// The owner is the UID of the object that created the table (or adopted
// it: Engine.Adopt); scope and interval record the layout so a later,
// different request is refused.
type Marker struct {
	Owner    string   `json:"idempotency.dev/owner"`
	Scope    Scope    `json:"scope,omitempty"`
	Interval Interval `json:"interval,omitempty"`
	Version  int      `json:"version,omitempty"`
	// AdoptedFrom is the previous owner when the table was taken over
	// with Engine.Adopt (the last adoption only); empty for a table still
	// owned by the object that created it. It is a record for people
	// reading the comment: nothing grants the previous owner any right.
	AdoptedFrom string `json:"adoptedFrom,omitempty"`
	// Kind is empty for a processed_event table and names the package of
	// a table of another kind that the partition engine keeps (kind.go):
	// "outbox" for consumer/outbox.
	Kind string `json:"kind,omitempty"`
}

// partitionMarker is the COMMENT on each partition we create. It makes a
// standalone table left by a crash (created but not attached, or detached
// but not dropped) recognisable as ours, with its intended bounds.
type partitionMarker struct {
	PartitionOf string `json:"idempotency.dev/partition-of"` // schema.table
	Owner       string `json:"idempotency.dev/owner"`
	From        string `json:"from"` // lower bound uuid
	To          string `json:"to"`   // upper bound uuid
}

// parseMarker decodes a table comment; ok is false for anything that is not
// a marker with an owner (including no comment at all).
func parseMarker(comment string) (Marker, bool) {
	var m Marker
	if err := json.Unmarshal([]byte(comment), &m); err != nil || m.Owner == "" {
		return Marker{}, false
	}
	return m, true
}

func parsePartitionMarker(comment string) (partitionMarker, bool) {
	var m partitionMarker
	if err := json.Unmarshal([]byte(comment), &m); err != nil || m.PartitionOf == "" || m.Owner == "" {
		return partitionMarker{}, false
	}
	return m, true
}

// ownerRE bounds owners to what object UIDs and names use, so a marker is
// always plain JSON that can be inlined as a SQL literal (COMMENT takes no
// parameters).
var ownerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$`)

// ValidateOwner checks an owner string for the ownership marker: 1 to 253
// characters of letters, digits and ._:/- (a Kubernetes UID fits).
func ValidateOwner(owner string) error {
	if !ownerRE.MatchString(owner) {
		return fmt.Errorf("invalid owner %q: want 1-253 characters of letters, digits and ._:/-", owner)
	}
	return nil
}

// quoteLiteral makes a SQL string literal for the contexts that take no
// parameters (COMMENT ON). It assumes standard_conforming_strings (the
// default since PostgreSQL 9.1) and refuses the characters whose meaning
// would depend on it.
func quoteLiteral(s string) (string, error) {
	if strings.ContainsAny(s, "\\\x00") {
		return "", errors.New("quoting literal: backslash or NUL not allowed")
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'", nil
}

func jsonLiteral(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding marker: %w", err)
	}
	return quoteLiteral(string(b))
}
