package consumer_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// slowProvider is the payment provider: each POST takes latency, and each
// Idempotency-Key is counted per path (one path per run).
type slowProvider struct {
	latency time.Duration
	mu      sync.Mutex
	keys    map[string]map[string]int
	start   map[string]time.Time
	last    map[string]time.Time
	cur     map[string]int
	peak    map[string]int
	busy    map[string]time.Duration   // sum of the requests' durations
	buckets map[string][]time.Duration // the same per 100 ms from the first request, by answer time
}

func newSlowProvider(latency time.Duration) *slowProvider {
	return &slowProvider{latency: latency, keys: map[string]map[string]int{}, start: map[string]time.Time{},
		last: map[string]time.Time{}, cur: map[string]int{}, peak: map[string]int{}, busy: map[string]time.Duration{}, buckets: map[string][]time.Duration{}}
}

func (p *slowProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	run := strings.TrimPrefix(r.URL.Path, "/")
	p.mu.Lock()
	if _, ok := p.start[run]; !ok {
		p.start[run] = time.Now()
		p.keys[run] = map[string]int{}
	}
	p.cur[run]++
	p.peak[run] = max(p.peak[run], p.cur[run])
	p.mu.Unlock()
	began := time.Now()
	_, _ = io.Copy(io.Discard, r.Body)
	time.Sleep(p.latency)
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "no Idempotency-Key", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.keys[run][key]++
	p.cur[run]--
	p.last[run] = time.Now()
	p.busy[run] += p.last[run].Sub(began)
	b := int(p.last[run].Sub(p.start[run]) / (100 * time.Millisecond))
	for len(p.buckets[run]) <= b {
		p.buckets[run] = append(p.buckets[run], 0)
	}
	p.buckets[run][b] += p.last[run].Sub(began)
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// profile returns the run's mean concurrency per 100 ms, for the log.
func (p *slowProvider) profile(run string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, d := range p.buckets[run] {
		fmt.Fprintf(&b, " %.0f", d.Seconds()/0.1)
	}
	return b.String()
}

// first is when the run's first request arrived.
func (p *slowProvider) first(run string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.start[run]
}

// span returns the run's first request, last answer, peak concurrency and
// mean concurrency between them.
func (p *slowProvider) span(run string) (first, last time.Time, peak int, mean float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first, last = p.start[run], p.last[run]
	return first, last, p.peak[run], p.busy[run].Seconds() / max(last.Sub(first).Seconds(), 1e-9)
}

// histogram returns the count and sum of a histogram in reg.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, 0
}

// counts returns the run's requests, distinct keys and the most requests of
// one key.
func (p *slowProvider) counts(run string) (calls, unique, perMax int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.keys[run] {
		calls += n
		perMax = max(perMax, n)
	}
	return calls, len(p.keys[run]), perMax
}

// slowShape is the streams' common layout: slowEvents records, of which
// slowDupShare are copies of an earlier record.
type slowShape struct {
	rng    *rand.Rand
	unique int
	key    []int // per unique event, its key number
	order  []int // record i is unique event order[i]
	isDup  []bool
	alt    []int // per record, the key number a re-keyed copy gets
}

func newSlowShape(rng *rand.Rand) *slowShape {
	dups := int(slowEvents * slowDupShare)
	s := &slowShape{rng: rng, unique: slowEvents - dups}
	for range s.unique {
		s.key = append(s.key, rng.IntN(slowKeys))
	}
	for i := range s.unique {
		s.order = append(s.order, i)
		s.isDup = append(s.isDup, false)
	}
	// Each copy goes to a random position after its original; dups distinct
	// originals get one copy each.
	for _, u := range rng.Perm(s.unique)[:dups] {
		at := slices.Index(s.order, u) + 1 + rng.IntN(len(s.order)-slices.Index(s.order, u))
		s.order = slices.Insert(s.order, at, u)
		s.isDup = slices.Insert(s.isDup, at, true)
	}
	parts := make([]int, slowParts)
	for i := range parts {
		parts[i] = i
	}
	for i := range s.order {
		a := -1
		if s.isDup[i] {
			home := slowPartition(s.key[s.order[i]], parts)
			for a < 0 || slowPartition(a, parts) == home {
				a = rng.IntN(slowKeys)
			}
		}
		s.alt = append(s.alt, a)
	}
	return s
}

func slowPartition(key int, parts []int) int {
	return (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(slowKey(key))}, parts...)
}

func slowKey(n int) string { return "customer-" + strconv.Itoa(n) }

// messages returns the stream with new ids; rekeyed gives each copy its
// other key (another partition).
func (s *slowShape) messages(rekeyed bool) []kafka.Message {
	ids := make([]uuid.UUID, s.unique)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	out := make([]kafka.Message, 0, len(s.order))
	for i, u := range s.order {
		key := s.key[u]
		if rekeyed && s.isDup[i] {
			key = s.alt[i]
		}
		out = append(out, kafka.Message{
			Key:   []byte(slowKey(key)),
			Value: fmt.Appendf(nil, `{"eventId":%q,"type":"charge","amount":"%d.00"}`, ids[u], s.rng.IntN(1000)),
		})
	}
	return out
}

// sampleTxOpen samples pg_stat_activity every 10 ms for the sessions named
// app and returns a function that stops and returns the oldest transaction
// seen (active or idle in transaction), in milliseconds.
func sampleTxOpen(t *testing.T, pool *pgxpool.Pool, app string) func() float64 {
	var maxMs atomic.Int64
	var samples atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var ms float64
			err := pool.QueryRow(context.Background(), `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)) * 1000, 0)::float8
				FROM pg_stat_activity
				WHERE application_name = $1 AND state IN ('active', 'idle in transaction') AND xact_start IS NOT NULL`, app).Scan(&ms)
			if err != nil {
				t.Errorf("sampling pg_stat_activity: %v", err)
				return
			}
			samples.Add(1)
			if int64(ms) > maxMs.Load() {
				maxMs.Store(int64(ms))
			}
		}
	}()
	return func() float64 {
		close(stop)
		<-done
		t.Logf("%s: %d pg_stat_activity samples", app, samples.Load())
		return float64(maxMs.Load())
	}
}
