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
