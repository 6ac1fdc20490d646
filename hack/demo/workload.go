package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
)

// Workload is what the demo produced, and what a correct system must make of it.
type Workload struct {
	Produced       int            // messages written to the topic
	Unique         int            // distinct valid ids inside the dedup window
	Duplicates     int            // extra copies of valid ids (other offsets, other partitions, replay)
	Replayed       int            // of Duplicates: the replay of an older range
	Malformed      map[string]int // expected dead-letter reason -> count
	OutsideWindow  int            // valid UUID v7 ids far outside the window
	AmountByID     map[uuid.UUID]int64
	ExpectedAmount int64 // sum of amounts over unique ids: what the ledger must hold
	// Valid events the ledger refuses (SQLSTATE 23514, dead-lettered as
	// handler_failed): Rejected over its amount limit until the demo
	// raises it (fixable: a replay applies them), Broken with an amount
	// that is never valid (they fail again and are parked).
	Rejected, Broken map[uuid.UUID]int64
}

// The ledger's rules (ledgerRulesDDL): amounts above amountLimit are
// refused until the demo drops the limit (the "bug fix"); amounts <= 0
// always.
const (
	amountLimit    = 100_000
	rejectedEvents = 10
	brokenEvents   = 3
)

// ledgerEvent is the JSON envelope the demo produces: eventId (UUID v7), type,
// occurredAt, and the payment fields the ledger sample's SQL sink reads.
type ledgerEvent struct {
	EventID    string    `json:"eventId,omitempty"`
	Type       string    `json:"type,omitempty"`
	OccurredAt time.Time `json:"occurredAt"`
	Account    string    `json:"account"`
	Amount     int64     `json:"amount"`
}

// newV7At returns a UUID v7 whose timestamp is t.
func newV7At(t time.Time) uuid.UUID {
	var u uuid.UUID
	_, _ = rand.Read(u[:])
	ms := uint64(t.UnixMilli())
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(u[0:6], ts[2:8])
	u[6] = (u[6] & 0x0f) | 0x70 // version 7
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 9562 variant
	return u
}

// produceWorkload writes the demo's events: unique events, duplicates at
// other offsets and partitions, a replay of the first tenth, malformed events
// of each kind, and events far outside the dedup window.
func produceWorkload(ctx context.Context, w *kafka.Writer, unique int, seed uint64, now time.Time) (*Workload, error) {
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) //nolint:gosec // G404: a seeded workload, reproducible on purpose
	wl := &Workload{Malformed: map[string]int{}, AmountByID: map[uuid.UUID]int64{},
		Rejected: map[uuid.UUID]int64{}, Broken: map[uuid.UUID]int64{}}

	encode := func(id uuid.UUID, at time.Time, amount int64) []byte {
		b, _ := json.Marshal(ledgerEvent{
			EventID: id.String(), Type: "payment.captured", OccurredAt: at,
			Account: fmt.Sprintf("acct-%03d", amount%37), Amount: amount,
		})
		return b
	}
	type ev struct {
		id    uuid.UUID
		value []byte
	}
	events := make([]ev, 0, unique)
	for i := range unique {
		// Ids from the last hour, in producer order, like a live stream.
		at := now.Add(-time.Hour + time.Duration(i)*time.Hour/time.Duration(unique))
		id := newV7At(at)
		amount := int64(rng.IntN(10_000) + 1)
		wl.AmountByID[id] = amount
		wl.ExpectedAmount += amount
		events = append(events, ev{id, encode(id, at, amount)})
	}
	wl.Unique = unique

	var batch []kafka.Message
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := w.WriteMessages(ctx, batch...); err != nil {
			return fmt.Errorf("producing: %w", err)
		}
		wl.Produced += len(batch)
		batch = batch[:0]
		return nil
	}
	add := func(key string, value []byte, headers ...kafka.Header) error {
		batch = append(batch, kafka.Message{Key: []byte(key), Value: value, Headers: headers})
		if len(batch) >= 500 {
			return flush()
		}
		return nil
	}

	// The stream, with about one in four events sent twice: the copy keyed
	// like the original (same partition, a later offset) or with another key
	// (another partition), as retries by a producer or an upstream would.
	for i, e := range events {
		if err := add(e.id.String(), e.value); err != nil {
			return wl, err
		}
		if rng.IntN(4) == 0 {
			key := e.id.String()
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("retry-%d", i)
			}
			if err := add(key, e.value); err != nil {
				return wl, err
			}
			wl.Duplicates++
		}
	}
	// Malformed events, each of a kind the consumer must dead-letter.
	bad := []struct {
		reason string
		value  []byte
	}{
		{"not_json", []byte("this is not json")},
		{"not_json", []byte(`{"eventId": "truncated`)},
		{"missing_id", []byte(`{"type":"payment.captured","payload":{"amount":5}}`)},
		{"missing_id", []byte(`{"eventId":"","type":"payment.captured"}`)},
		{"invalid_uuid", []byte(`{"eventId":"order-42","type":"payment.captured"}`)},
		{"invalid_uuid", []byte(`{"eventId":"0190f0a0-zzzz-7abc-8def-0123456789ab"}`)},
		{"wrong_uuid_version", []byte(`{"eventId":"` + uuid.New().String() + `","type":"payment.captured"}`)},
		{"wrong_uuid_version", []byte(`{"eventId":"` + uuid.NewSHA1(uuid.NameSpaceURL, []byte("x")).String() + `"}`)},
	}
	for i, b := range bad {
		if err := add(fmt.Sprintf("bad-%d", i), b.value); err != nil {
			return wl, err
		}
		wl.Malformed[b.reason]++
	}
	// Valid events the ledger refuses: over its limit (until it is raised),
	// and never valid.
	for i := range rejectedEvents + brokenEvents {
		id := newV7At(now.Add(-time.Minute))
		amount := int64(amountLimit + 1 + rng.IntN(amountLimit))
		if i >= rejectedEvents {
			amount = -int64(rng.IntN(100) + 1)
			wl.Broken[id] = amount
		} else {
			wl.Rejected[id] = amount
		}
		if err := add(id.String(), encode(id, now.Add(-time.Minute), amount)); err != nil {
			return wl, err
		}
	}
	// Valid ids far outside the window: a year old, and a year ahead.
	for _, at := range []time.Time{now.AddDate(-1, 0, 0), now.AddDate(1, 0, 0)} {
		id := newV7At(at)
		if err := add(id.String(), encode(id, at, 1)); err != nil {
			return wl, err
		}
		wl.OutsideWindow++
	}
	if err := flush(); err != nil {
		return wl, err
	}
	// A replay of an older range: the first tenth of the stream again, as an
	// offset reset or a dead-letter replay would deliver it.
	for _, e := range events[:unique/10] {
		if err := add(e.id.String(), e.value); err != nil {
			return wl, err
		}
		wl.Duplicates++
		wl.Replayed++
	}
	return wl, flush()
}
