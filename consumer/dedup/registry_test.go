package dedup

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestSharedTable: two users with their own groups share one table; each
// deduplicates on its own; the group of one cannot be registered by
// another; maintenance keeps the longest retention and largest premake
// registered whoever runs it; the first to leave leaves the table, the last
// (with drop) drops it with its registry and positions.
func TestSharedTable(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Schema: "shared", Name: "processed_event", Scope: ScopeConsumerGroup, Interval: Daily}
	owner := SharedOwner(tbl)
	if owner != "shared:shared.processed_event" || !IsSharedOwner(owner) || IsSharedOwner(testOwner) {
		t.Fatalf("SharedOwner = %q", owner)
	}
	if err := ValidateOwner(owner); err != nil {
		t.Fatalf("the shared owner must be a valid marker owner: %v", err)
	}
	a, err := NewEngine(pool, tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewEngine(pool, tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*Engine{a, b} {
		if err := e.EnsureTable(ctx, owner); err != nil {
			t.Fatalf("EnsureTable(shared owner): %v", err)
		}
	}
	ua := User{ID: "uid-a", Group: "billing", Object: "ns/a", Retention: 48 * time.Hour, Premake: 2, DropOnDelete: true}
	ub := User{ID: "uid-b", Group: "ledger", Object: "ns/b", Retention: 240 * time.Hour, Premake: 5, DropOnDelete: true}
	if _, err := a.Register(ctx, ua); err != nil {
		t.Fatalf("Register a: %v", err)
	}
	users, err := b.Register(ctx, ub)
	if err != nil {
		t.Fatalf("Register b: %v", err)
	}
	if len(users) != 2 || users[0].ID != "uid-a" || users[1].ID != "uid-b" || users[1].Retention != ub.Retention || users[1].Premake != 5 {
		t.Fatalf("users after two registrations: %+v", users)
	}
	// Registering again with the same values changes nothing; a changed
	// premake is recorded.
	ua.Premake = 3
	if users, err = a.Register(ctx, ua); err != nil || users[0].Premake != 3 || len(users) != 2 {
		t.Fatalf("re-register a with premake 3: %+v, %v", users, err)
	}

	t.Run("a group registered by another user is refused", func(t *testing.T) {
		_, err := b.Register(ctx, User{ID: "uid-c", Group: "billing", Object: "ns/c", Retention: time.Hour, Premake: 1})
		var gu *GroupInUseError
		if !errors.As(err, &gu) || gu.Holder != "ns/a" || gu.Group != "billing" {
			t.Fatalf("Register(uid-c, billing) = %v, want *GroupInUseError naming ns/a", err)
		}
	})

	t.Run("an exclusive table is not registered on", func(t *testing.T) {
		other := Table{Schema: "shared", Name: "exclusive_event", Scope: ScopeConsumerGroup, Interval: Daily}
		e := newEngine(t, pool, other)
		_, err := e.Register(ctx, ua)
		var oe *OwnershipError
		if !errors.As(err, &oe) || oe.Owner != testOwner {
			t.Fatalf("Register on an exclusive table = %v, want *OwnershipError naming %s", err, testOwner)
		}
	})

	// Maintenance asked with a's small policy keeps b's: partitions back to
	// 10 days (b's retention, not a's 2) and 5 ahead (b's premake, not a's 3).
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	res, err := a.Maintain(ctx, now, ua.Premake, ua.Retention)
	if err != nil {
		t.Fatalf("Maintain: %v", err)
	}
	if want := Daily.Floor(now.Add(-ub.Retention)); !res.Window.From.Equal(want) {
		t.Fatalf("window starts %v, want %v (b's retention of 10 days)", res.Window.From, want)
	}
	if want := Daily.Floor(now).AddDate(0, 0, 6); !res.Window.To.Equal(want) {
		t.Fatalf("window ends %v, want %v (b's premake 5)", res.Window.To, want)
	}
	res, err = b.Maintain(ctx, now, ub.Premake, ub.Retention)
	if err != nil || len(res.Created) != 0 || len(res.Dropped) != 0 {
		t.Fatalf("b's maintenance right after a's: created %v, dropped %v, %v; want nothing to do", res.Created, res.Dropped, err)
	}

	// Each group deduplicates on its own.
	ins := func(group string) *Inserter {
		in, err := NewInserter(tbl, group, WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	ia, ib := ins("billing"), ins("ledger")
	id := idAt(now)
	if r := insertCommit(t, pool, ia, id, id); !r.Fresh[0] || r.Fresh[1] {
		t.Fatalf("billing, first sight: %+v", r)
	}
	if r := insertCommit(t, pool, ib, id); !r.Fresh[0] {
		t.Fatalf("ledger sees the id billing processed as a duplicate: %+v", r)
	}
	if r := insertCommit(t, pool, ia, id, uuid.Must(uuid.NewV7())); r.Fresh[0] {
		t.Fatalf("billing, second sight: %+v", r)
	}

	// The first to leave leaves the table; the last drops it.
	lr, err := a.Leave(ctx, "uid-a", true)
	if err != nil || lr.Dropped || !lr.WasRegistered || len(lr.Remaining) != 1 || lr.Remaining[0].ID != "uid-b" {
		t.Fatalf("Leave a: %+v, %v; want the table kept for b", lr, err)
	}
	if r := insertCommit(t, pool, ib, id); r.Fresh[0] {
		t.Fatalf("ledger after billing left: %+v, want the duplicate still known", r)
	}
	lr, err = b.Leave(ctx, "uid-b", true)
	if err != nil || !lr.Dropped || len(lr.Remaining) != 0 {
		t.Fatalf("Leave b: %+v, %v; want the table dropped", lr, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = 'shared' AND c.relname LIKE 'processed_event%' AND c.relkind IN ('r', 'p')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d tables named processed_event* remain after the last user left with drop", n)
	}
	if lr, err := b.Leave(ctx, "uid-b", true); err != nil || lr.Dropped {
		t.Fatalf("Leave on a dropped table: %+v, %v; want nothing to do", lr, err)
	}
}

// TestLeaveWithoutDropKeepsTable: the last user leaving without drop
// (deletionPolicy Retain) keeps the table, and a new user can register.
func TestLeaveWithoutDropKeepsTable(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl := Table{Schema: "shared", Name: "kept_event"}
	e, err := NewEngine(pool, tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.EnsureTable(ctx, SharedOwner(tbl)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Register(ctx, User{ID: "uid-a", Group: "g", Object: "ns/a", Retention: time.Hour, Premake: 1}); err != nil {
		t.Fatal(err)
	}
	lr, err := e.Leave(ctx, "uid-a", false)
	if err != nil || lr.Dropped || len(lr.Remaining) != 0 {
		t.Fatalf("Leave: %+v, %v", lr, err)
	}
	st, err := e.Observe(ctx)
	if err != nil || !st.Exists {
		t.Fatalf("table after the last user left without drop: %+v, %v", st, err)
	}
	// One that never registered, leaving with drop, does not drop a table
	// the last user kept.
	if lr, err := e.Leave(ctx, "uid-never", true); err != nil || lr.Dropped || lr.WasRegistered {
		t.Fatalf("Leave of an unregistered user with drop: %+v, %v; want the table kept", lr, err)
	}
	if users, err := e.Register(ctx, User{ID: "uid-b", Group: "g", Object: "ns/b", Retention: time.Hour, Premake: 1}); err != nil || len(users) != 1 {
		t.Fatalf("a new user takes the group of one that left: %+v, %v", users, err)
	}
}

func TestEffectivePolicy(t *testing.T) {
	users := []User{{Premake: 2, Retention: time.Hour}, {Premake: 7, Retention: 0}, {Premake: 0, Retention: 48 * time.Hour}}
	if p, r := EffectivePolicy(users, 3, 2*time.Hour); p != 7 || r != 48*time.Hour {
		t.Fatalf("EffectivePolicy = %d, %v; want 7, 48h", p, r)
	}
	if p, r := EffectivePolicy(nil, 3, 2*time.Hour); p != 3 || r != 2*time.Hour {
		t.Fatalf("EffectivePolicy(no users) = %d, %v; want the caller's", p, r)
	}
}
