package consumer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// health tracks what readiness depends on. Each component records the
// outcome of its last operation; the consumer is ready when it is in a group
// generation and none of them is failing.
type health struct {
	mu       sync.Mutex
	running  bool
	stopping bool
	joined   bool
	failing  map[string]error // component -> last error
	since    map[string]time.Time
	onChange func(ready bool)
	last     bool
	dbOK     time.Time // last committed batch transaction
}

// dbSucceeded records a committed transaction: proof the database answers.
func (h *health) dbSucceeded() {
	h.mu.Lock()
	h.dbOK = time.Now()
	h.mu.Unlock()
}

func (h *health) dbRecentlyOK(within time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Since(h.dbOK) < within
}

func newHealth(onChange func(bool)) *health {
	return &health{failing: map[string]error{}, since: map[string]time.Time{}, onChange: onChange}
}

// Components that can fail.
const (
	compDatabase = "database"
	compKafka    = "kafka"
	compGroup    = "group"
	compDLQ      = "deadLetter"
	compSetup    = "setup"
	compHandler  = "handler" // an external handler's dependency declared Unavailable
)

func (h *health) update(fn func()) {
	h.mu.Lock()
	fn()
	ready := h.readyLocked() == nil
	changed := ready != h.last
	h.last = ready
	cb := h.onChange
	h.mu.Unlock()
	if changed && cb != nil {
		cb(ready)
	}
}

// fail records a failing component; it returns true when the component was
// healthy before (so callers can log once per outage).
func (h *health) fail(comp string, err error) (first bool) {
	h.update(func() {
		_, was := h.failing[comp]
		first = !was
		h.failing[comp] = err
		if first {
			h.since[comp] = time.Now()
		}
	})
	return first
}

// ok clears a component; it returns how long it was failing (0 if it wasn't).
func (h *health) ok(comp string) (outage time.Duration) {
	h.mu.Lock()
	_, was := h.failing[comp]
	h.mu.Unlock()
	if !was {
		return 0
	}
	h.update(func() {
		if _, was := h.failing[comp]; was {
			outage = time.Since(h.since[comp])
			delete(h.failing, comp)
			delete(h.since, comp)
		}
	})
	return outage
}

func (h *health) setJoined(j bool)   { h.update(func() { h.joined = j }) }
func (h *health) setRunning(r bool)  { h.update(func() { h.running = r }) }
func (h *health) setStopping(s bool) { h.update(func() { h.stopping = s }) }

func (h *health) readyLocked() error {
	switch {
	case !h.running:
		return errors.New("not running")
	case h.stopping:
		return errors.New("shutting down")
	}
	for _, comp := range []string{compSetup, compDatabase, compKafka, compGroup, compDLQ, compHandler} {
		if err, ok := h.failing[comp]; ok {
			return fmt.Errorf("%s: %w", comp, err)
		}
	}
	if !h.joined {
		return errors.New("not in a consumer group generation yet")
	}
	return nil
}

func (h *health) ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.readyLocked()
}

func (h *health) alive() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running
}

// Ready reports nil when the consumer is in a group generation, its database
// answers, and its last broker and database operations succeeded; otherwise
// why not. Unless a batch committed in the last few seconds it pings the
// database (1s timeout), so that an outage shows even while no events arrive;
// while batches are committing it doesn't, so a busy pool can't make it flap.
func (c *Consumer) Ready(ctx context.Context) error {
	if err := c.health.ready(); err != nil {
		return err
	}
	if c.health.dbRecentlyOK(5 * time.Second) {
		return nil
	}
	c.mu.Lock()
	pool := c.pool
	c.mu.Unlock()
	if pool == nil {
		return errors.New("database pool not open")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", redact.Err(err, c.secrets...))
	}
	return nil
}

// Handler serves /healthz (200 while Run is running), /readyz (200 when
// Ready, else 503 with the reason) and /metrics (Prometheus).
func (c *Consumer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !c.health.alive() {
			http.Error(w, "not running", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(c.gatherer, promhttp.HandlerOpts{}))
	return mux
}
