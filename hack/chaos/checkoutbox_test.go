package main

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// The outbox checker counts each violation in a crafted history, and a
// clean history (with republished duplicates after a takeover) passes.
func TestOutboxCheck(t *testing.T) {
	ids := make([]uuid.UUID, 8)
	uids := make([]uuid.UUID, 8)
	for i := range ids {
		ids[i], uids[i] = uuid.Must(uuid.NewV7()), uuid.New()
	}
	order := func(i int, key string, seq int) outboxOrder {
		return outboxOrder{key: key, seq: seq, uid: uids[i], eventID: ids[i]}
	}
	rec := func(p int, off int64, o outboxOrder) outboxRecord {
		return outboxRecord{partition: p, offset: off, key: o.key, id: o.eventID, ceID: o.eventID.String(),
			payload: outboxPayload{Key: o.key, Seq: o.seq, UID: o.uid}}
	}
	a1, a2, a3 := order(0, "a", 1), order(1, "a", 2), order(2, "a", 3)
	b1, b2 := order(3, "b", 1), order(4, "b", 2)
	orders := []outboxOrder{a1, a2, a3, b1, b2}
	// The clean history: b's events in partition 1; a's in partition 0,
	// a2 and a3 published again after a takeover (duplicates go back in seq).
	clean := func() outboxHistory {
		return outboxHistory{
			orders: orders,
			records: [][]outboxRecord{
				{rec(0, 0, a1), rec(0, 1, a2), rec(0, 2, a3), rec(0, 3, a2), rec(0, 4, a3)},
				{rec(1, 0, b1), rec(1, 1, b2)},
			},
			rolledBack: []uuid.UUID{uids[6]},
			applied:    map[uuid.UUID]int{ids[0]: 1, ids[1]: 1, ids[2]: 1, ids[3]: 1, ids[4]: 1},
		}
	}
	var r OutboxResult
	r.LagZero = true
	checkOutbox(clean(), &r)
	if v := r.Violations(); len(v) != 0 {
		t.Fatalf("clean history: %v", v)
	}
	if r.Committed != 5 || r.PublishedDistinct != 5 || r.Republished != 2 || r.RolledBack != 1 || r.Applied != 5 {
		t.Fatalf("clean history counted %+v", r)
	}

	// A rolled-back order's event (uid 6) and a killed transaction's (uid 7).
	rolledBack := outboxOrder{key: "a", seq: 4, uid: uids[6], eventID: ids[6]}
	killed := outboxOrder{key: "b", seq: 3, uid: uids[7], eventID: ids[7]}
	cases := []struct {
		name  string
		mod   func(*outboxHistory)
		count func(OutboxResult) int
		want  int
		msg   string
	}{
		{"never published", func(h *outboxHistory) { h.records[1] = h.records[1][:1] },
			func(r OutboxResult) int { return r.Lost }, 1, "1 committed events lost (1 never published"},
		{"published, never applied", func(h *outboxHistory) { delete(h.applied, ids[2]) },
			func(r OutboxResult) int { return r.Lost }, 1, "0 never published, 1 published but never applied"},
		{"rolled back, published", func(h *outboxHistory) { h.records[0] = append(h.records[0], rec(0, 5, rolledBack)) },
			func(r OutboxResult) int { return r.RolledBackPublished*10 + r.UncommittedPublished }, 11, "1 events of transactions that did not commit published (1 of them rolled back"},
		{"killed before commit, published", func(h *outboxHistory) { h.records[1] = append(h.records[1], rec(1, 2, killed)) },
			func(r OutboxResult) int { return r.UncommittedPublished }, 1, "(0 of them rolled back"},
		{"rolled back, committed", func(h *outboxHistory) { h.rolledBack = append(h.rolledBack, uids[0]) },
			func(r OutboxResult) int { return r.RolledBackCommitted }, 1, "1 rolled-back orders have a business row"},
		{"first publications out of key order", func(h *outboxHistory) {
			h.records[0] = []outboxRecord{rec(0, 0, a1), rec(0, 1, a3), rec(0, 2, a2), rec(0, 3, a3)}
		}, func(r OutboxResult) int { return len(r.OrderViolations) }, 1, "key a: seq 2"},
		{"a key in two partitions", func(h *outboxHistory) {
			h.records[0] = h.records[0][:2]
			h.records[1] = append(h.records[1], rec(1, 2, a3))
		}, func(r OutboxResult) int { return len(r.OrderViolations) }, 1, "key a published in partitions 0 and 1"},
		{"applied twice", func(h *outboxHistory) { h.applied[ids[3]] = 3 },
			func(r OutboxResult) int { return r.AppliedTwice }, 2, "2 events applied twice"},
		{"applied, never committed", func(h *outboxHistory) { h.applied[ids[7]] = 1 },
			func(r OutboxResult) int { return r.AppliedUnknown }, 1, "1 applied events have no business row"},
		{"ce_id is not the eventId", func(h *outboxHistory) { h.records[1][0].ceID = ids[4].String() },
			func(r OutboxResult) int { return r.Mismatched }, 1, "1 records whose ce_id"},
		{"payload is not the row's", func(h *outboxHistory) { h.records[1][1].payload.Seq = 7 },
			func(r OutboxResult) int { return r.Mismatched }, 1, "1 records whose ce_id, key or payload"},
		{"no eventId header", func(h *outboxHistory) {
			h.records[1] = append(h.records[1], outboxRecord{partition: 1, offset: 2, bad: true})
		},
			func(r OutboxResult) int { return r.Bad }, 1, "1 records without an eventId header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			tc.mod(&h)
			r := OutboxResult{LagZero: true}
			checkOutbox(h, &r)
			if got := tc.count(r); got != tc.want {
				t.Errorf("counted %d, want %d (%+v)", got, tc.want, r)
			}
			if v := strings.Join(r.Violations(), "; "); !strings.Contains(v, tc.msg) {
				t.Errorf("violations %q, want %q", v, tc.msg)
			}
		})
	}
	r = OutboxResult{}
	checkOutbox(clean(), &r)
	if v := strings.Join(r.Violations(), "; "); !strings.Contains(v, "lag did not reach zero") {
		t.Errorf("lag: violations %q", v)
	}
}
