package main

import (
	"context"
	"encoding/json"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
)

// chaosEvent is the JSON envelope produced.
type chaosEvent struct {
	EventID string `json:"eventId"`
	Type    string `json:"type"`
	Payload struct {
		Amount int64 `json:"amount"`
	} `json:"payload"`
}

// produce writes o.Events messages at an even rate over o.ProduceFor: new ids
// stamped with the simulated clock, duplicates of recent ids (other keys, so
// other partitions too), replays of older ranges, and malformed messages.
// Writes are retried until they succeed, across broker restarts; a retried
// batch may land twice, which is just more duplicates.
func produce(ctx context.Context, o Options, seed uint64, brokers []string, clock simClock, res *Result) error {
	rng := mrand.New(mrand.NewPCG(seed, 7)) //nolint:gosec // G404: a seeded workload, reproducible on purpose
	w := consumertest.NewWriter(brokers, topic)
	w.MaxAttempts = 3
	defer w.Close()
	var ids []uuid.UUID
	const batch = 100
	start := time.Now()
	for sent := 0; sent < o.Events; {
		msgs := make([]kafka.Message, 0, batch)
		for len(msgs) < batch && sent+len(msgs) < o.Events {
			r := rng.Float64()
			switch {
			case r < o.MalformedShare:
				msgs = append(msgs, kafka.Message{Key: []byte("bad"), Value: malformed(rng)})
			case r < o.MalformedShare+o.DuplicateShare && len(ids) > 0:
				var id uuid.UUID
				if rng.IntN(5) == 0 { // a replay from anywhere earlier
					id = ids[rng.IntN(len(ids))]
				} else { // a recent duplicate
					id = ids[len(ids)-1-rng.IntN(min(len(ids), 500))]
				}
				key := id.String()
				if rng.IntN(2) == 0 {
					key = "dup-" + strconv.Itoa(rng.IntN(1000))
				}
				msgs = append(msgs, kafka.Message{Key: []byte(key), Value: encode(id)})
			default:
				id := newV7At(clock.now(), rng)
				ids = append(ids, id)
				msgs = append(msgs, kafka.Message{Key: []byte(id.String()), Value: encode(id)})
			}
		}
		for {
			err := w.WriteMessages(ctx, msgs...)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.ProduceRetries++
			time.Sleep(200 * time.Millisecond)
		}
		sent += len(msgs)
		res.Produced = sent
		// Pace to spread the stream over ProduceFor.
		due := start.Add(time.Duration(float64(o.ProduceFor) * float64(sent) / float64(o.Events)))
		localstack.Sleep(ctx, time.Until(due))
	}
	return nil
}

// encode gives every id a deterministic amount, so the ledger total is checkable.
func encode(id uuid.UUID) []byte {
	e := chaosEvent{EventID: id.String(), Type: "chaos"}
	e.Payload.Amount = amountOf(id)
	b, _ := json.Marshal(e)
	return b
}

func amountOf(id uuid.UUID) int64 { return int64(id[15]) + 1 }

func malformed(rng *mrand.Rand) []byte {
	switch rng.IntN(4) {
	case 0:
		return []byte("not json at all")
	case 1:
		return []byte(`{"type":"chaos"}`)
	case 2:
		return []byte(`{"eventId":"not-a-uuid"}`)
	default:
		return []byte(`{"eventId":"` + uuid.New().String() + `"}`) // v4
	}
}

func newV7At(t time.Time, rng *mrand.Rand) uuid.UUID {
	var u uuid.UUID
	for i := range u {
		u[i] = byte(rng.Uint32()) //nolint:gosec // G115: the low byte, truncation intended
	}
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (8 * (5 - i))) //nolint:gosec // G115: one byte of the timestamp, truncation intended
	}
	u[6] = (u[6] & 0x0f) | 0x70
	u[8] = (u[8] & 0x3f) | 0x80
	return u
}
