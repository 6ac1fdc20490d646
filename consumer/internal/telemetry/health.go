package telemetry

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Health tracks what readiness depends on. Each component records the
// outcome of its last operation; the consumer is ready when it is in a group
// generation and none of them is failing.
type Health struct {
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

// DBSucceeded records a committed transaction: proof the database answers.
func (h *Health) DBSucceeded() {
	h.mu.Lock()
	h.dbOK = time.Now()
	h.mu.Unlock()
}

func (h *Health) DBRecentlyOK(within time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Since(h.dbOK) < within
}

// NewHealth returns a Health that calls onChange when readiness changes.
func NewHealth(onChange func(bool)) *Health {
	return &Health{failing: map[string]error{}, since: map[string]time.Time{}, onChange: onChange}
}

// Components that can fail.
const (
	CompDatabase = "database"
	CompKafka    = "kafka"
	CompGroup    = "group"
	CompDLQ      = "deadLetter"
	CompSetup    = "setup"
	CompHandler  = "handler" // an external handler's dependency declared Unavailable
)

func (h *Health) update(fn func()) {
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

// Fail records a failing component; it returns true when the component was
// healthy before (so callers can log once per outage).
func (h *Health) Fail(comp string, err error) (first bool) {
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

// OK clears a component; it returns how long it was failing (0 if it wasn't).
func (h *Health) OK(comp string) (outage time.Duration) {
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

func (h *Health) SetJoined(j bool)   { h.update(func() { h.joined = j }) }
func (h *Health) SetRunning(r bool)  { h.update(func() { h.running = r }) }
func (h *Health) SetStopping(s bool) { h.update(func() { h.stopping = s }) }

func (h *Health) readyLocked() error {
	switch {
	case !h.running:
		return errors.New("not running")
	case h.stopping:
		return errors.New("shutting down")
	}
	for _, comp := range []string{CompSetup, CompDatabase, CompKafka, CompGroup, CompDLQ, CompHandler} {
		if err, ok := h.failing[comp]; ok {
			return fmt.Errorf("%s: %w", comp, err)
		}
	}
	if !h.joined {
		return errors.New("not in a consumer group generation yet")
	}
	return nil
}

func (h *Health) Ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.readyLocked()
}

func (h *Health) Alive() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running
}
