package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The previous owner is testOwner (newEngine creates tables for it).
const (
	newOwner   = "7c0e5b8e-2f4a-4d1b-8a63-0b9e4f1d2c35"
	thirdOwner = "e1d2c3b4-a5f6-4789-9abc-def012345678"
)

var adoptStart = time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)

const (
	adoptPremake   = 2
	adoptRetention = 4 * time.Hour
)

// oldOwnersTable builds what a previous owner leaves behind: an Hourly
// table with partitions 09:00-15:00 attached, rows in two of them, and two
// standalone tables of its own that crashes left: 08:00 detached but not
// dropped (expired) and 16:00 created but not attached. Every marker names
// testOwner.
func oldOwnersTable(t *testing.T, pool *pgxpool.Pool) (tbl Table, rows int) {
	tbl, rows, _ = oldOwnersTableIDs(t, pool)
	return tbl, rows
}

// oldOwnersTableIDs is oldOwnersTable that also returns the ids inserted
// (at 12:00, 10:00 and 12:01).
func oldOwnersTableIDs(t *testing.T, pool *pgxpool.Pool) (tbl Table, rows int, ids []uuid.UUID) {
	t.Helper()
	ctx := testCtx(t)
	tbl = Table{Interval: Hourly}
	old := newEngine(t, pool, tbl)
	if _, err := old.Maintain(ctx, adoptStart, adoptPremake, adoptRetention); err != nil {
		t.Fatal(err)
	}
	in, _ := NewInserter(tbl, "g")
	ids = idsAt(adoptStart, adoptStart.Add(-2*time.Hour), adoptStart.Add(time.Minute))
	insertCommit(t, pool, in, ids...)
	for _, c := range []struct {
		step Step
		now  time.Time
	}{{StepDetached, adoptStart.Add(time.Hour)}, {StepCreated, adoptStart.Add(2 * time.Hour)}} {
		hook, _ := crashAt(c.step)
		crashy, err := NewEngine(pool, tbl, WithStepHook(hook), WithoutFirstPartitions())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := crashy.Maintain(ctx, c.now, adoptPremake, adoptRetention); !errors.Is(err, errCrash) {
			t.Fatalf("setup: Maintain crashing at %s = %v", c.step, err)
		}
	}
	st, err := old.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantOrphans := []string{hourName(8), hourName(16)}
	if !slices.Equal(names(st.Orphans), wantOrphans) || len(st.Partitions) != 7 {
		t.Fatalf("setup: orphans %v, want %v; partitions %v, want 09-15", names(st.Orphans), wantOrphans, partitionNames(st.Partitions))
	}
	return tbl, countRows(t, pool, "processed_event"), ids
}

func hourName(h int) string {
	return PartitionName("processed_event", Hourly, time.Date(2024, 6, 1, h, 0, 0, 0, time.UTC))
}

// ownerMarkers maps the table and every table named like its partitions to
// the owner their comment names ("" for none, "?" for a comment that is not
// a marker).
func ownerMarkers(t *testing.T, pool *pgxpool.Pool, table string) map[string]string {
	t.Helper()
	rows, err := pool.Query(testCtx(t), `SELECT relname::text, coalesce(obj_description(oid, 'pg_class'), '')
		FROM pg_class WHERE relkind IN ('r', 'p') AND (relname = $1 OR relname LIKE $2)`, table, table+`\_p%`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, comment string
		if err := rows.Scan(&name, &comment); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		switch {
		case comment == "":
			out[name] = ""
		case json.Unmarshal([]byte(comment), &m) != nil:
			out[name] = "?"
		default:
			owner, _ := m["idempotency.dev/owner"].(string)
			out[name] = owner
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// assertOwners checks that every relation of ownerMarkers names owner.
func assertOwners(t *testing.T, got map[string]string, owner string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%d marked relations, want %d: %v", len(got), n, got)
	}
	for name, o := range got {
		if o != owner {
			t.Fatalf("%s is marked for %q, want %q (all: %v)", name, o, owner, got)
		}
	}
}

// TestAdopt: a new owner takes over the previous owner's table, its
// partitions and the standalone tables a crash left; the rows stay; the
// next Maintain recognises the standalone ones (attaches the current one,
// drops the expired one) and drops and creates partitions as planned.
// Adopting again is a no-op; the previous owner is now refused.
func TestAdopt(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	tbl, rows, ids := oldOwnersTableIDs(t, pool)
	// Another dedup table in the schema with the same owner: not touched.
	other := newEngine(t, pool, Table{Name: "other_event", Interval: Hourly})
	if _, err := other.Maintain(ctx, adoptStart, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	// A standalone table named like a partition of ours but marked by a
	// third owner: not touched.
	decoy := PartitionName("processed_event", Hourly, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	dlo, dhi := Hourly.partition("processed_event", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)).Bounds()
	dm, _ := jsonLiteral(partitionMarker{PartitionOf: "public.processed_event", Owner: thirdOwner, From: dlo.String(), To: dhi.String()})
	if _, err := pool.Exec(ctx, `CREATE TABLE `+decoy+` (LIKE processed_event); COMMENT ON TABLE `+decoy+` IS `+dm); err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(pool, tbl, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}

	var oe *OwnershipError
	if err := e.EnsureTable(ctx, newOwner); !errors.As(err, &oe) || oe.Owner != testOwner {
		t.Fatalf("EnsureTable by the new owner before adoption = %v, want *OwnershipError naming %s", err, testOwner)
	}

	res, err := e.Adopt(ctx, newOwner, testOwner)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	want := []string{hourName(8), hourName(9), hourName(10), hourName(11), hourName(12), hourName(13), hourName(14), hourName(15), hourName(16)}
	if !res.Adopted || res.Created || !slices.Equal(res.Partitions, want) {
		t.Fatalf("Adopt = %+v, want adopted with partitions %v", res, want)
	}
	got := ownerMarkers(t, pool, "processed_event")
	if got[decoy] != thirdOwner {
		t.Fatalf("the third owner's table %s was touched: %v", decoy, got)
	}
	delete(got, decoy)
	assertOwners(t, got, newOwner, 10)
	assertOwners(t, ownerMarkers(t, pool, "other_event"), testOwner, 4)
	if _, err := pool.Exec(ctx, `DROP TABLE `+decoy); err != nil {
		t.Fatal(err)
	}

	st, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantMarker := Marker{Owner: newOwner, Scope: ScopeConsumerGroup, Interval: Hourly, Version: markerVersion, AdoptedFrom: testOwner}
	if st.Marker != wantMarker {
		t.Fatalf("marker after adoption %+v, want %+v", st.Marker, wantMarker)
	}
	if !slices.Equal(names(st.Orphans), []string{hourName(8), hourName(16)}) {
		t.Fatalf("the standalone tables are not recognised as the new owner's: orphans %v", names(st.Orphans))
	}
	if err := e.EnsureTable(ctx, newOwner); err != nil {
		t.Fatalf("EnsureTable by the new owner after adoption: %v", err)
	}
	if n := countRows(t, pool, "processed_event"); n != rows {
		t.Fatalf("%d rows after adoption, want %d", n, rows)
	}

	// Maintenance under the new owner: 16:00 attached from the standalone
	// table, 09:00 and the standalone 08:00 dropped.
	now := adoptStart.Add(2 * time.Hour)
	mres, err := e.Maintain(ctx, now, adoptPremake, adoptRetention)
	if err != nil {
		t.Fatalf("Maintain after adoption: %v", err)
	}
	if !slices.Equal(names(mres.Created), []string{hourName(16)}) || !slices.Equal(names(mres.Dropped), []string{hourName(8), hourName(9)}) {
		t.Fatalf("Maintain after adoption created %v dropped %v, want [16] and [08 09]", names(mres.Created), names(mres.Dropped))
	}
	assertConverged(t, pool, e, now, adoptPremake, adoptRetention)
	// A partition created now carries the new owner's marker.
	later := now.Add(time.Hour)
	if mres, err = e.Maintain(ctx, later, adoptPremake, adoptRetention); err != nil || !slices.Equal(names(mres.Created), []string{hourName(17)}) {
		t.Fatalf("Maintain an hour later: created %v, err %v", names(mres.Created), err)
	}
	assertOwners(t, ownerMarkers(t, pool, "processed_event"), newOwner, 8) // the table and 11:00-17:00
	// An id inserted under the previous owner, in a partition still kept, is a duplicate.
	in, _ := NewInserter(tbl, "g")
	if r := insertCommit(t, pool, in, ids[0], ids[2]); r.Fresh[0] || r.Fresh[1] {
		t.Fatalf("ids inserted before the adoption are fresh again: %+v", r)
	}

	// Again: nothing to do.
	res, err = e.Adopt(ctx, newOwner, testOwner)
	if err != nil || res.Adopted || res.Created || len(res.Partitions) != 0 {
		t.Fatalf("Adopt again = %+v, %v; want a no-op", res, err)
	}
	// The previous owner is refused from now on.
	if err := e.EnsureTable(ctx, testOwner); !errors.As(err, &oe) || oe.Owner != newOwner {
		t.Fatalf("EnsureTable by the previous owner = %v, want *OwnershipError naming %s", err, newOwner)
	}
	if err := e.DropTable(ctx, testOwner); !errors.As(err, &oe) {
		t.Fatalf("DropTable by the previous owner = %v, want *OwnershipError", err)
	}
}

// TestAdoptRefused: a marker naming a third owner, a table without a
// marker, and a layout that differs are refused, and nothing changes.
func TestAdoptRefused(t *testing.T) {
	t.Run("third owner", func(t *testing.T) {
		pool := newPool(t)
		ctx := testCtx(t)
		tbl, _ := oldOwnersTable(t, pool)
		before := ownerMarkers(t, pool, "processed_event")
		e, _ := NewEngine(pool, tbl, WithoutFirstPartitions())
		_, err := e.Adopt(ctx, newOwner, thirdOwner)
		var oe *OwnershipError
		if !errors.As(err, &oe) || oe.Owner != testOwner || oe.AdoptFrom != thirdOwner {
			t.Fatalf("Adopt from a third owner = %v, want *OwnershipError{Owner: %s, AdoptFrom: %s}", err, testOwner, thirdOwner)
		}
		if msg := err.Error(); !strings.Contains(msg, testOwner) || !strings.Contains(msg, thirdOwner) {
			t.Fatalf("message %q does not name both the marker's owner and the one asked for", msg)
		}
		if after := ownerMarkers(t, pool, "processed_event"); !maps.Equal(before, after) {
			t.Fatalf("markers changed by a refused adoption: %v -> %v", before, after)
		}
		assertOwners(t, before, testOwner, 10)
	})

	t.Run("no marker", func(t *testing.T) {
		pool := newPool(t)
		ctx := testCtx(t)
		if _, err := pool.Exec(ctx, `CREATE TABLE processed_event (event_id uuid NOT NULL, consumer_group text NOT NULL,
			processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (event_id, consumer_group)) PARTITION BY RANGE (event_id)`); err != nil {
			t.Fatal(err)
		}
		e, _ := NewEngine(pool, Table{Interval: Hourly}, WithoutFirstPartitions())
		_, err := e.Adopt(ctx, newOwner, testOwner)
		var oe *OwnershipError
		if !errors.As(err, &oe) || oe.Owner != "" || oe.AdoptFrom != testOwner || !strings.Contains(err.Error(), "without an ownership marker") {
			t.Fatalf("Adopt of an unmarked table = %v, want *OwnershipError without owner", err)
		}
		if got := ownerMarkers(t, pool, "processed_event"); got["processed_event"] != "" {
			t.Fatalf("the unmarked table got a marker: %v", got)
		}
	})

	t.Run("layout differs", func(t *testing.T) {
		pool := newPool(t)
		ctx := testCtx(t)
		oldOwnersTable(t, pool)
		e, _ := NewEngine(pool, Table{Interval: Daily}, WithoutFirstPartitions())
		_, err := e.Adopt(ctx, newOwner, testOwner)
		var le *LayoutError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), "interval") {
			t.Fatalf("Adopt with another interval = %v, want *LayoutError about the interval", err)
		}
		e, _ = NewEngine(pool, Table{Interval: Hourly, Scope: ScopeGlobal}, WithoutFirstPartitions())
		if _, err := e.Adopt(ctx, newOwner, testOwner); !errors.As(err, &le) {
			t.Fatalf("Adopt with another scope = %v, want *LayoutError", err)
		}
		assertOwners(t, ownerMarkers(t, pool, "processed_event"), testOwner, 10)
	})

	t.Run("invalid owners", func(t *testing.T) {
		// A pool to nowhere: an error from it would be a connection error,
		// so "invalid owner" shows the call was refused before any SQL.
		nowhere, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
		if err != nil {
			t.Fatal(err)
		}
		defer nowhere.Close()
		e, _ := NewEngine(nowhere, Table{}, WithoutFirstPartitions())
		for _, c := range [][2]string{{newOwner, "x'; DROP TABLE processed_event; --"}, {"", testOwner}, {newOwner, ""}} {
			_, err := e.Adopt(context.Background(), c[0], c[1])
			var oe *OwnershipError
			if err == nil || errors.As(err, &oe) || !strings.Contains(err.Error(), "invalid owner") {
				t.Fatalf("Adopt(%q, %q) = %v, want an invalid owner error", c[0], c[1], err)
			}
		}
	})
}
