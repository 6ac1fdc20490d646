package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The provider applies a request it then drops: the caller sees no answer,
// the provider has recorded the key. Keys are counted per request.
func TestProviderDropsAfterApplying(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dropShare float64
		wantErr   bool
	}{{"answers", 0, false}, {"drops", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := startProvider(1, time.Millisecond, tc.dropShare)
			if err != nil {
				t.Fatal(err)
			}
			defer p.stop()
			for range 2 {
				req, _ := http.NewRequest(http.MethodPost, p.url(), strings.NewReader("{}"))
				req.Header.Set("Idempotency-Key", "k1")
				resp, err := http.DefaultClient.Do(req)
				if tc.wantErr {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("status %d, want the connection dropped", resp.StatusCode)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d, want 200", resp.StatusCode)
				}
			}
			resp, err := http.Post(p.url(), "application/json", strings.NewReader("{}"))
			if err == nil {
				resp.Body.Close()
			}
			counts, requests, drops, noKey := p.snapshot()
			wantDrops := 0
			if tc.wantErr {
				wantDrops = 3
			}
			if counts["k1"] != 2 || requests != 3 || drops != wantDrops || noKey != 1 {
				t.Fatalf("counts %v, requests %d, drops %d, no key %d; want k1=2, 3, %d, 1", counts, requests, drops, noKey, wantDrops)
			}
		})
	}
}

// The HTTP checks fail a run with a missing id or a second dedup row, and
// pass a clean one.
func TestHTTPViolations(t *testing.T) {
	clean := Result{HTTPConsumers: 1, ProviderRequests: 10, HTTPRecorded: 9, HTTPDedupRowsPerIDMax: 1, ProviderRequestsPerIDMax: 3, HTTPSnapshots: 5}
	if v := clean.httpViolations(); len(v) != 0 {
		t.Fatalf("clean run: %v", v)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Result)
		want string
	}{
		{"missing", func(r *Result) { r.ProviderMissing = 1 }, "never reached the provider"},
		{"two rows", func(r *Result) { r.HTTPDedupRowsPerIDMax = 2 }, "2 dedup rows"},
		{"no key", func(r *Result) { r.ProviderNoKey = 1 }, "without an Idempotency-Key"},
		{"aborted", func(r *Result) { r.ProviderAborted = 1 }, "aborted transactions"},
		{"recorded uncalled", func(r *Result) { r.HTTPRecordedNotCalled = 1 }, "recorded without a call"},
		{"unrecorded", func(r *Result) { r.HTTPUnrecorded = 1 }, "neither recorded nor dead-lettered"},
		{"nothing", func(r *Result) { r.ProviderRequests = 0 }, "nothing to check"},
		{"malformed", func(r *Result) { r.HTTPMalformedMissing = 1 }, "malformed messages missing"},
		{"offsets", func(r *Result) { r.HTTPOffsetViolations = []string{"partition 0: offset 3 committed past"} }, "HTTP group: partition 0"},
	} {
		r := clean
		tc.mod(&r)
		if v := strings.Join(r.httpViolations(), "; "); !strings.Contains(v, tc.want) {
			t.Errorf("%s: violations %q, want %q", tc.name, v, tc.want)
		}
	}
}
