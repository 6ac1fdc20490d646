package upgrade

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// producer writes events to one topic until stopped: each a new UUID v7 id,
// and every fifth message an id written before (a duplicate that must not be
// applied again, possibly by the other build). It remembers the ids written
// (acknowledged) and those whose write failed (maybe written).
type producer struct {
	topic string
	mu    sync.Mutex
	ids   []uuid.UUID
	acked map[uuid.UUID]bool
	maybe map[uuid.UUID]bool
	sent  int
	errs  int
}

func newProducer(topic string) *producer {
	return &producer{topic: topic, acked: map[uuid.UUID]bool{}, maybe: map[uuid.UUID]bool{}}
}

func newV7() uuid.UUID {
	var u uuid.UUID
	_, _ = rand.Read(u[:])
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(time.Now().UnixMilli()))
	copy(u[0:6], ts[2:8])
	u[6] = (u[6] & 0x0f) | 0x70
	u[8] = (u[8] & 0x3f) | 0x80
	return u
}

type event struct {
	EventID    string    `json:"eventId"`
	Type       string    `json:"type"`
	OccurredAt time.Time `json:"occurredAt"`
	Amount     int64     `json:"amount"`
}

// run produces every interval until ctx ends.
func (p *producer) run(ctx context.Context, brokers []string, interval time.Duration, seed uint64) {
	w := consumertest.NewWriter(brokers, p.topic)
	defer w.Close()
	rng := mrand.New(mrand.NewPCG(seed, seed^0x5bd1e995))
	for n := 0; ctx.Err() == nil; n++ {
		id := newV7()
		p.mu.Lock()
		if n%5 == 4 && len(p.ids) > 0 {
			id = p.ids[rng.IntN(len(p.ids))]
		}
		p.mu.Unlock()
		b, _ := json.Marshal(event{EventID: id.String(), Type: "upgrade.test", OccurredAt: time.Now().UTC(), Amount: int64(n)})
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := w.WriteMessages(wctx, kafka.Message{Key: []byte(fmt.Sprintf("k%d", rng.IntN(16))), Value: b})
		cancel()
		p.mu.Lock()
		p.sent++
		switch {
		case err != nil:
			p.errs++
			if !p.acked[id] {
				p.maybe[id] = true
			}
		case !p.acked[id]:
			p.acked[id] = true
			delete(p.maybe, id)
			p.ids = append(p.ids, id)
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// provider is the HTTP sink's endpoint: it counts the requests per object
// (the path) and Idempotency-Key.
type provider struct {
	mu     sync.Mutex
	calls  map[string]map[string]int
	nokeys int
}

func (pr *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	obj := strings.Trim(r.URL.Path, "/")
	key := r.Header.Get("Idempotency-Key")
	pr.mu.Lock()
	if key == "" {
		pr.nokeys++
	} else {
		if pr.calls[obj] == nil {
			pr.calls[obj] = map[string]int{}
		}
		pr.calls[obj][key]++
	}
	pr.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// tally is the check of one object's effects against what was produced.
type tally struct {
	events, lost, duplicates, unknown int
}

// check compares applied (id -> times applied) with what p produced.
func (p *producer) check(applied map[string]int) tally {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t tally
	for _, id := range p.ids {
		t.events++
		switch n := applied[id.String()]; {
		case n == 0:
			t.lost++
		case n > 1:
			t.duplicates += n - 1
		}
	}
	for id, n := range applied {
		u, err := uuid.Parse(id)
		if err != nil || (!p.acked[u] && !p.maybe[u]) {
			t.unknown += n
		} else if p.maybe[u] && n > 1 {
			t.duplicates += n - 1
		}
	}
	return t
}

// appliedSQL reads the business table's rows of one object.
func appliedSQL(ctx context.Context, conn *pgx.Conn, obj string) (map[string]int, error) {
	rows, err := conn.Query(ctx, `SELECT event_id::text, count(*) FROM upgrade_applied WHERE obj = $1 GROUP BY event_id`, obj)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}
