package dedup

// Marker is the ownership marker stored as the table's COMMENT, as JSON.
type Marker struct {
	Owner    string   `json:"idempotency.dev/owner"`
	Scope    Scope    `json:"scope,omitempty"`
	Interval Interval `json:"interval,omitempty"`
	Version  int      `json:"version,omitempty"`
}
