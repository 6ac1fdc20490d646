package dedup

import (
	"slices"
	"testing"
)

// TestRisks: which settings and standbys Risks reports.
func TestRisks(t *testing.T) {
	named := func(states ...string) []Standby {
		var out []Standby
		for i, s := range states {
			out = append(out, Standby{Name: string(rune('a' + i)), SyncState: s})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		d    Durability
		want []string
	}{
		{"alone", Durability{SynchronousCommit: "on"}, nil},
		{"off alone", Durability{SynchronousCommit: "off"}, []string{RiskSynchronousCommitOff}},
		{"async standby", Durability{SynchronousCommit: "on", Standbys: named("async")}, []string{RiskAsyncStandby}},
		{"standby not visible, no sync names", Durability{SynchronousCommit: "on", Standbys: []Standby{{}}}, []string{RiskAsyncStandby}},
		{"standby not visible, sync names", Durability{SynchronousCommit: "on", SynchronousStandbyNames: "*", Standbys: []Standby{{}}}, nil},
		{"sync", Durability{SynchronousCommit: "on", SynchronousStandbyNames: "*", Standbys: named("sync")}, nil},
		{"remote_apply", Durability{SynchronousCommit: "remote_apply", SynchronousStandbyNames: "a", Standbys: named("sync")}, nil},
		{"quorum", Durability{SynchronousCommit: "on", SynchronousStandbyNames: "ANY 1 (a, b)", Standbys: named("quorum", "quorum")}, nil},
		{"sync and potential", Durability{SynchronousCommit: "on", SynchronousStandbyNames: "FIRST 1 (a, b)", Standbys: named("sync", "potential")}, []string{RiskAsyncStandby}},
		{"local", Durability{SynchronousCommit: "local", SynchronousStandbyNames: "*", Standbys: named("sync")}, []string{RiskAsyncStandby}},
		{"off with sync standby", Durability{SynchronousCommit: "off", SynchronousStandbyNames: "*", Standbys: named("sync")}, []string{RiskSynchronousCommitOff, RiskAsyncStandby}},
	} {
		var got []string
		for _, r := range tc.d.Risks() {
			if r.Message == "" {
				t.Errorf("%s: risk %s without a message", tc.name, r.Reason)
			}
			got = append(got, r.Reason)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: Risks() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
