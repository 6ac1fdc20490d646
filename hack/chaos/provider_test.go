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
			p, err := startProvider(1, time.Millisecond, tc.dropShare, providerFaults{})
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

// A request whose key is still in progress gets 409 and is not applied; the
// slow one is applied once done. Rate-limited requests get 429 with a
// Retry-After (seconds, then an HTTP date) and are not applied.
func TestProviderBusyAndRateLimited(t *testing.T) {
	p, err := startProvider(1, time.Millisecond, 0, providerFaults{SlowShare: 1, SlowDelay: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	// post sends one request and returns its status and headers.
	type answer struct {
		StatusCode int
		Header     http.Header
	}
	post := func(p *provider) answer {
		req, _ := http.NewRequest(http.MethodPost, p.url(), strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return answer{resp.StatusCode, resp.Header}
	}
	first := make(chan int)
	go func() { first <- post(p).StatusCode }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if slow, _, _ := p.faultCounts(); slow == 1 {
			break // the first is in progress (and has 3 s to go)
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request never arrived")
		}
	}
	if st := post(p).StatusCode; st != http.StatusConflict {
		t.Errorf("a request while the key is in progress: %d, want 409", st)
	}
	if st := <-first; st != http.StatusOK {
		t.Errorf("the slow request: %d, want 200", st)
	}
	counts, _, _, _ := p.snapshot()
	if slow, busy, _ := p.faultCounts(); counts["k1"] != 1 || slow != 1 || busy != 1 {
		t.Errorf("k1 applied %d times, %d slow, %d busy; want 1, 1, 1", counts["k1"], slow, busy)
	}

	rl, err := startProvider(1, time.Millisecond, 0, providerFaults{RateShare: 1, RetryAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.stop()
	for i := range 2 {
		resp := post(rl)
		ra := resp.Header.Get("Retry-After")
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", resp.StatusCode)
		}
		if _, err := http.ParseTime(ra); (i == 0 && ra != "2") || (i == 1 && err != nil) {
			t.Errorf("Retry-After %q (answer %d), want 2 then an HTTP date", ra, i+1)
		}
	}
	if counts, _, _, _ := rl.snapshot(); counts["k1"] != 0 {
		t.Errorf("rate-limited requests applied %d times", counts["k1"])
	}
}

// Dead letters whose error is a retryable HTTP answer are counted.
func TestDeadLetteredRetryable(t *testing.T) {
	dl := deadLetters{all: []deadLetter{
		{err: "permanent: HTTP 409"}, {err: "retry after 2s: HTTP 429: slow down"}, {err: "HTTP 503"},
		{err: "permanent: HTTP 400: bad"}, {err: "POST http://x: context deadline exceeded"}, {err: "invalid_uuid"},
	}}
	if n := dl.retryable(); n != 3 {
		t.Fatalf("%d retryable dead letters, want 3", n)
	}
}
