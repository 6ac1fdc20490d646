package main

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idempotency-dev/operator/hack/internal/localstack"
	"github.com/jackc/pgx/v5"
)

// provider is the payment provider the HTTP consumers call: it records every
// request's Idempotency-Key (how often it came), takes Delay per call, and
// for DropShare of the requests applies the request and then drops the
// connection without answering, so the consumer cannot know it took effect
// and must repeat the call with the same key.
//
// Like a provider following the Idempotency-Key draft, it answers 409 to a
// request whose key is still being processed: SlowShare of the requests
// take SlowDelay, longer than the consumers' request timeout, so the retry
// arrives while the first is still running. And it rate-limits: RateShare of
// the requests are answered 429 with a Retry-After (in seconds, or every
// other time as an HTTP date) without being applied. Neither answer may end
// in a dead letter.
type provider struct {
	delay     time.Duration
	dropShare float64
	faults    providerFaults
	srv       *http.Server
	ln        net.Listener

	mu         sync.Mutex
	rng        *mrand.Rand
	counts     map[string]int
	inProgress map[string]bool
	requests   int
	drops      int
	noKey      int
	slow       int // requests that took SlowDelay
	busy       int // 409 answers: the key was in progress
	limited    int // 429 answers with Retry-After
}

// providerFaults are the retryable answers the provider gives.
type providerFaults struct {
	SlowShare  float64
	SlowDelay  time.Duration
	RateShare  float64
	RetryAfter time.Duration // whole seconds
}

func startProvider(seed uint64, delay time.Duration, dropShare float64, faults providerFaults) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the HTTP provider: %w", err)
	}
	p := &provider{delay: delay, dropShare: dropShare, faults: faults, ln: ln,
		rng: mrand.New(mrand.NewPCG(seed, 17)), counts: map[string]int{}, inProgress: map[string]bool{}} //nolint:gosec // G404: a seeded fault schedule, reproducible on purpose
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *provider) url() string { return "http://" + p.ln.Addr().String() + "/charge" }

func (p *provider) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
}

// ServeHTTP answers 409 while the request's key is in progress, or 429 with
// a Retry-After; else it applies the request (records its key) and answers
// 200, or drops the connection after applying it. A slow request goes on
// after its caller gave up.
func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	if key != "" && p.inProgress[key] {
		p.busy++
		p.mu.Unlock()
		w.WriteHeader(http.StatusConflict)
		return
	}
	if p.rng.Float64() < p.faults.RateShare {
		p.limited++
		asDate := p.limited%2 == 0
		p.mu.Unlock()
		secs := max(int(p.faults.RetryAfter/time.Second), 1)
		if asDate {
			w.Header().Set("Retry-After", time.Now().Add(time.Duration(secs+1)*time.Second).UTC().Format(http.TimeFormat))
		} else {
			w.Header().Set("Retry-After", strconv.Itoa(secs))
		}
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	delay := p.delay
	if p.rng.Float64() < p.faults.SlowShare {
		p.slow++
		delay = p.faults.SlowDelay
	}
	if key != "" {
		p.inProgress[key] = true
	}
	p.mu.Unlock()
	time.Sleep(delay)
	p.mu.Lock()
	delete(p.inProgress, key)
	p.requests++
	if key == "" {
		p.noKey++
	} else {
		p.counts[key]++
	}
	drop := p.rng.Float64() < p.dropShare
	if drop {
		p.drops++
	}
	p.mu.Unlock()
	if drop {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		// Hijacking unsupported (HTTP/2): abort the handler, which resets the stream.
		panic(http.ErrAbortHandler)
	}
	w.WriteHeader(http.StatusOK)
}

// faultCounts returns how many requests were slow, answered 409 and
// answered 429.
func (p *provider) faultCounts() (slow, busy, limited int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slow, p.busy, p.limited
}

// snapshot returns a copy of the per-key request counts and the totals.
func (p *provider) snapshot() (counts map[string]int, requests, drops, noKey int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts = make(map[string]int, len(p.counts))
	for k, n := range p.counts {
		counts[k] = n
	}
	return counts, p.requests, p.drops, p.noKey
}

// txMonitor samples pg_stat_activity and keeps the longest open transaction
// of the sessions with the given application names.
type txMonitor struct {
	mu      sync.Mutex
	max     map[string]time.Duration // by application_name
	samples int
}

func (m *txMonitor) observe(app string, age time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if age > m.max[app] {
		m.max[app] = age
	}
}

// run samples every interval until ctx ends; failed samples (PostgreSQL
// restarting) are skipped.
func (m *txMonitor) run(ctx context.Context, dbURL string, apps []string, interval time.Duration) {
	m.max = map[string]time.Duration{}
	for ctx.Err() == nil {
		m.sampleOnce(ctx, dbURL, apps, interval)
		localstack.Sleep(ctx, time.Second)
	}
}

// sampleOnce holds one connection and samples until it fails or ctx ends.
func (m *txMonitor) sampleOnce(ctx context.Context, dbURL string, apps []string, interval time.Duration) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	for ctx.Err() == nil {
		rows, err := conn.Query(ctx, `SELECT application_name, extract(epoch FROM clock_timestamp() - xact_start)
			FROM pg_stat_activity WHERE application_name = ANY($1) AND xact_start IS NOT NULL`, apps)
		if err != nil {
			return
		}
		for rows.Next() {
			var app string
			var secs float64
			if rows.Scan(&app, &secs) == nil {
				m.observe(app, time.Duration(secs*float64(time.Second)))
			}
		}
		if rows.Err() != nil {
			return
		}
		m.mu.Lock()
		m.samples++
		m.mu.Unlock()
		localstack.Sleep(ctx, interval)
	}
}

// result returns the longest transaction per application and overall.
func (m *txMonitor) result() (map[string]time.Duration, time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.samples == 0 {
		return nil, 0, errors.New("no pg_stat_activity sample was taken")
	}
	var top time.Duration
	out := map[string]time.Duration{}
	for k, v := range m.max {
		out[k] = v
		top = max(top, v)
	}
	return out, top, nil
}
