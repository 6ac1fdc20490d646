package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The offset checker must catch a commit that ran ahead of the database, and
// a commit past an event that was never handled; it must accept a correct run.
func TestCheckOffsets(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	msgs := [][]message{{
		{partition: 0, offset: 0, id: uuid.New(), valid: true},
		{partition: 0, offset: 1, id: uuid.New(), valid: true},
		{partition: 0, offset: 2, reason: "not_json"},
		{partition: 0, offset: 3, id: uuid.New(), valid: true},
	}}
	done := map[int64]time.Time{0: t0, 1: t0.Add(time.Second), 2: t0.Add(2 * time.Second), 3: t0.Add(3 * time.Second)}
	doneAt := func(m message) (time.Time, bool) { at, ok := done[m.offset]; return at, ok }
	snap := func(at time.Time, off int64) offsetSnapshot {
		return offsetSnapshot{at: at, offsets: map[int]int64{0: off}}
	}

	tests := []struct {
		name      string
		snapshots []offsetSnapshot
		doneAt    func(message) (time.Time, bool)
		want      string // substring of the violation; "" for none
	}{
		{"commits after the database", []offsetSnapshot{snap(t0.Add(1500*time.Millisecond), 2), snap(t0.Add(4*time.Second), 4)}, doneAt, ""},
		{"nothing committed yet", []offsetSnapshot{snap(t0.Add(-time.Hour), 0)}, doneAt, ""},
		{"commit ahead of the database", []offsetSnapshot{snap(t0.Add(1500*time.Millisecond), 3)}, doneAt, "before the events below it were durable"},
		{"commit past a lost event", []offsetSnapshot{snap(t0.Add(time.Hour), 4)},
			func(m message) (time.Time, bool) {
				if m.offset == 2 {
					return time.Time{}, false
				}
				return doneAt(m)
			}, "committed past offset 2, which was never handled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkOffsets(msgs, tt.doneAt, tt.snapshots)
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("violations %v, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], tt.want) {
				t.Fatalf("violations %v, want one containing %q", got, tt.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	v7 := "0190f0a0-1234-7abc-8def-0123456789ab"
	for value, want := range map[string]string{
		`{"eventId":"` + v7 + `"}`: "",
		`nope`:                     "not_json",
		`{"type":"x"}`:             "missing_id",
		`{"eventId":""}`:           "missing_id",
		`{"eventId":"order-1"}`:    "invalid_uuid",
		`{"eventId":"` + uuid.New().String() + `"}`:          "wrong_uuid_version",
		`{"eventId":"0190f0a0-1234-7abc-cdef-0123456789ab"}`: "wrong_uuid_version", // wrong variant
	} {
		if _, got := classify([]byte(value)); got != want {
			t.Errorf("classify(%s) = %q, want %q", value, got, want)
		}
	}
}
