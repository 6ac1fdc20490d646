package controllers

import (
	"testing"
	"time"
)

// TestReplayCutoffCoversItsOwnSecond: a dead letter written before the
// DeadLetterReplay, in the same second, is before its cutoff. With the
// cutoff truncated to whole seconds, a replay created 300 ms after a burst
// of dead letters selected none of them (the demo's round trip: "replay
// selected 0 (dry run 0), dead letters in the topic 23").
func TestReplayCutoffCoversItsOwnSecond(t *testing.T) {
	letter := time.Date(2026, 12, 6, 2, 54, 38, 310_000_000, time.UTC)
	for _, created := range []time.Duration{0, time.Millisecond, 300 * time.Millisecond, 689 * time.Millisecond} {
		now := letter.Add(created)
		c := replayCutoff(now)
		if letter.After(c) {
			t.Errorf("created %v after the dead letter: cutoff %s is before it (%s)", created, c.Format(time.RFC3339Nano), letter.Format(time.RFC3339Nano))
		}
		if c.Nanosecond() != 0 || c.Before(now) || c.Sub(now) >= time.Second {
			t.Errorf("cutoff %s of %s: want the next whole second at or after it", c.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
		}
	}
	whole := time.Date(2026, 12, 6, 2, 54, 39, 0, time.UTC)
	if c := replayCutoff(whole); !c.Equal(whole) {
		t.Errorf("cutoff of a whole second %s: %s", whole, c)
	}
}
