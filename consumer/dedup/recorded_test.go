package dedup

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestRecordedAgreesWithInsert: the lock-free lookup the external protocol
// runs before calling a handler reports exactly the ids a later Insert finds
// already recorded, with the same out-of-window verdict, for both scopes.
func TestRecordedAgreesWithInsert(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	now := time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC)
	for i, scope := range []Scope{ScopeConsumerGroup, ScopeGlobal} {
		tbl := Table{Name: []string{"rec_group", "rec_global"}[i], Scope: scope, Interval: Daily}
		e := newEngine(t, pool, tbl)
		if _, err := e.Maintain(ctx, now, 0, 48*time.Hour); err != nil {
			t.Fatal(err)
		}
		in, err := NewInserter(tbl, "g", WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		other, err := NewInserter(tbl, "other", WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		mine, theirs, fresh, old := idAt(now), idAt(now.Add(time.Minute)), idAt(now.Add(2*time.Minute)), idAt(now.AddDate(-1, 0, 0))
		insertCommit(t, pool, in, mine)
		insertCommit(t, pool, other, theirs)

		ids := []uuid.UUID{mine, theirs, fresh, old, mine}
		recorded, outside, err := in.Recorded(ctx, pool, ids)
		if err != nil {
			t.Fatalf("%s: %v", scope, err)
		}
		// Under ScopeGlobal another group's row counts; under ConsumerGroup it doesn't.
		wantRec := []bool{true, scope == ScopeGlobal, false, false, true}
		wantOut := []bool{false, false, false, true, false}
		if !slices.Equal(recorded, wantRec) || !slices.Equal(outside, wantOut) {
			t.Fatalf("%s: Recorded = %v outside %v, want %v outside %v", scope, recorded, outside, wantRec, wantOut)
		}
		res := insertCommit(t, pool, in, ids...)
		for k := range ids {
			if k == 4 {
				continue // a repeat within the batch is never fresh
			}
			if res.Outside[k] != outside[k] || (!outside[k] && res.Fresh[k] == recorded[k]) {
				t.Errorf("%s: id %d: Insert says fresh=%v outside=%v, Recorded said recorded=%v outside=%v",
					scope, k, res.Fresh[k], res.Outside[k], recorded[k], outside[k])
			}
		}
	}
}
