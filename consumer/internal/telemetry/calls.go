package telemetry

import (
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer/event"
)

// Calls tracks the handler calls running, transactional and
// external, so that a shutdown that cannot wait for them any longer can say
// which events it abandoned.
type Calls struct {
	mu    sync.Mutex
	calls map[*handlerCall]struct{}
}

type handlerCall struct {
	partition int
	offset    int64
	id        uuid.UUID
	started   time.Time
}

// NewCalls returns an empty Calls.
func NewCalls() *Calls {
	return &Calls{calls: map[*handlerCall]struct{}{}}
}

// Start records a call of ev's handler; the returned func ends it.
func (h *Calls) Start(ev *event.Event) func() {
	hc := &handlerCall{partition: ev.Partition, offset: ev.Offset, id: ev.ID, started: time.Now()}
	h.mu.Lock()
	h.calls[hc] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.calls, hc)
		h.mu.Unlock()
	}
}

// Abandon logs each call still running and returns how many there are.
// Their events are not recorded (a call that returns later finds its
// context done, and its result is dropped) and no offset moves past them:
// the next owner of the partition gets them again.
func (h *Calls) Abandon(log *slog.Logger) int {
	h.mu.Lock()
	calls := make([]*handlerCall, 0, len(h.calls))
	for hc := range h.calls {
		calls = append(calls, hc)
	}
	h.mu.Unlock()
	sort.Slice(calls, func(i, j int) bool {
		a, b := calls[i], calls[j]
		return a.partition < b.partition || a.partition == b.partition && a.offset < b.offset
	})
	for _, hc := range calls {
		log.Warn("shutdown: abandoned a handler call that did not return; its event is not recorded and the offset does not move past it (the next run gets it again)",
			"partition", hc.partition, "offset", hc.offset, "eventId", hc.id, "running", time.Since(hc.started).Round(time.Millisecond))
	}
	return len(calls)
}
