package dedup

import (
	"strings"
	"testing"
	"time"
)

// TestLongConsumerGroups: consumer_group is stored PLAIN (no TOAST per
// partition). A group of the CRD's longest, 255 characters of four bytes
// each, and one of 2,500 bytes, are recorded under both scopes by the
// Inserter and by the claim function, and a repeated claim is a duplicate.
// (Longer ones fail in PostgreSQL: under ConsumerGroup the primary key's
// B-tree refuses an incompressible group over some 2,670 bytes, as before;
// under Global a row over 8,160 bytes, a group of some 8,100, which TOAST
// used to take.)
func TestLongConsumerGroups(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	now := time.Now().UTC()
	for _, scope := range []Scope{ScopeConsumerGroup, ScopeGlobal} {
		t.Run(string(scope), func(t *testing.T) {
			tbl := Table{Name: "lg_" + strings.ToLower(string(scope)), Scope: scope, Interval: Hourly}
			e := newEngine(t, pool, tbl)
			if _, err := e.Maintain(ctx, now, 1, 2*time.Hour); err != nil {
				t.Fatal(err)
			}
			for _, group := range []string{strings.Repeat("\U0001F600", 255), strings.Repeat("g", 2500)} {
				in, err := NewInserter(tbl, group)
				if err != nil {
					t.Fatal(err)
				}
				id := idAt(now)
				if r := insertCommit(t, pool, in, id); !r.Fresh[0] {
					t.Fatalf("group of %d bytes: %+v, want fresh", len(group), r)
				}
				if r := insertCommit(t, pool, in, id); r.Fresh[0] || r.Outside[0] {
					t.Fatalf("group of %d bytes again: %+v, want a duplicate", len(group), r)
				}
				id2 := idAt(now)
				for _, want := range []string{"new", "duplicate"} {
					var v string
					if err := pool.QueryRow(ctx, "SELECT "+tbl.ClaimOneFunction()+"($1, $2)", id2, group).Scan(&v); err != nil || v != want {
						t.Fatalf("claim_one with a group of %d bytes: %q, %v; want %s", len(group), v, err, want)
					}
				}
			}
		})
	}
}
