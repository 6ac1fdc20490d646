package dedup

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func relExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(testCtx(t), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestPositionsTable: EnsureTable creates the positions table with the dedup
// table, adds it to a table made without one (an older version), refuses a
// name taken by something not ours, and DropTable drops it; Positions reads
// and records per group, topic and partition.
func TestPositionsTable(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t)
	e, err := NewEngine(pool, Table{Scope: ScopeGlobal}, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.EnsureTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	if !relExists(t, pool, "public.processed_event_offsets") {
		t.Fatal("EnsureTable created no positions table public.processed_event_offsets")
	}

	// Two groups share a Global table: their positions are apart.
	pa, err := NewPositions(Table{Scope: ScopeGlobal}, "a")
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := NewPositions(Table{Scope: ScopeGlobal}, "b")
	if err := pa.Check(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := pa.Read(ctx, pool, "t", 0); err != nil || ok {
		t.Fatalf("Read of an unknown partition = ok %v, err %v; want none", ok, err)
	}
	if prev, ok, err := pa.Record(ctx, pool, "t", 0, 10); err != nil || ok {
		t.Fatalf("first Record = %d, %v, %v; want no previous position", prev, ok, err)
	}
	if prev, ok, err := pa.Record(ctx, pool, "t", 0, 25); err != nil || !ok || prev != 10 {
		t.Fatalf("second Record = %d, %v, %v; want previous 10", prev, ok, err)
	}
	if _, _, err := pb.Record(ctx, pool, "t", 0, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    *Positions
		part int
		want int64
		ok   bool
	}{{pa, 0, 25, true}, {pb, 0, 3, true}, {pa, 1, 0, false}} {
		got, ok, err := c.p.Read(ctx, pool, "t", c.part)
		if err != nil || ok != c.ok || got != c.want {
			t.Fatalf("Read(%s, %d) = %d, %v, %v; want %d, %v", c.p.group, c.part, got, ok, err, c.want, c.ok)
		}
	}

	t.Run("an older table gets one", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `DROP TABLE public.processed_event_offsets`); err != nil {
			t.Fatal(err)
		}
		if err := pa.Check(ctx, pool); !errors.Is(err, ErrPositionsTableMissing) || !strings.Contains(err.Error(), "public.processed_event_offsets") {
			t.Fatalf("Check without the table = %v, want ErrPositionsTableMissing naming it", err)
		}
		if err := e.EnsureTable(ctx, testOwner); err != nil {
			t.Fatal(err)
		}
		if err := pa.Check(ctx, pool); err != nil {
			t.Fatalf("after EnsureTable: %v", err)
		}
	})

	t.Run("a name taken by something else is refused", func(t *testing.T) {
		other, err := NewEngine(pool, Table{Name: "taken"}, WithoutFirstPartitions())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `CREATE TABLE public.taken_offsets (x int)`); err != nil {
			t.Fatal(err)
		}
		var nc *NameConflictError
		if err := other.EnsureTable(ctx, testOwner); !errors.As(err, &nc) || nc.Name != "public.taken_offsets" {
			t.Fatalf("EnsureTable with taken_offsets taken = %v, want *NameConflictError naming it", err)
		}
		// Dropping the dedup table leaves a table that is not ours alone.
		if err := other.DropTable(ctx, testOwner); err != nil {
			t.Fatal(err)
		}
		if !relExists(t, pool, "public.taken_offsets") {
			t.Fatal("DropTable dropped a taken_offsets table that was not ours")
		}
	})

	t.Run("longest table name", func(t *testing.T) {
		name := strings.Repeat("n", MaxTableNameLen)
		long, err := NewEngine(pool, Table{Name: name}, WithoutFirstPartitions())
		if err != nil {
			t.Fatal(err)
		}
		if err := long.EnsureTable(ctx, testOwner); err != nil {
			t.Fatal(err)
		}
		if !relExists(t, pool, "public."+name+"_offsets") {
			t.Fatal("no positions table for the longest table name")
		}
		if err := long.EnsureTable(ctx, testOwner); err != nil {
			t.Fatalf("second EnsureTable: %v", err)
		}
	})

	if err := e.DropTable(ctx, testOwner); err != nil {
		t.Fatal(err)
	}
	if relExists(t, pool, "public.processed_event_offsets") {
		t.Fatal("DropTable left the positions table")
	}
}

// TestCheckScope: a table is refused for the other scope, naming both.
func TestCheckScope(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t)
	for _, s := range []Scope{ScopeGlobal, ScopeConsumerGroup} {
		tab := Table{Name: "t_" + strings.ToLower(string(s)), Scope: s}
		e, err := NewEngine(pool, tab, WithoutFirstPartitions())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.EnsureTable(ctx, testOwner); err != nil {
			t.Fatal(err)
		}
		if err := CheckScope(ctx, pool, tab); err != nil {
			t.Fatalf("CheckScope(%s on %s) = %v", s, s, err)
		}
		other := ScopeGlobal
		if s == ScopeGlobal {
			other = ScopeConsumerGroup
		}
		wrong := tab
		wrong.Scope = other
		err = CheckScope(ctx, pool, wrong)
		var se *ScopeError
		if !errors.As(err, &se) || se.Configured != other || se.Marker != s {
			t.Fatalf("CheckScope(%s on a %s table) = %v, want *ScopeError", other, s, err)
		}
		for _, want := range []string{tab.String(), "keyed for scope " + string(s), "configured with scope " + string(other)} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("message %q does not name %q", err, want)
			}
		}
	}
	if err := CheckScope(ctx, pool, Table{Name: "missing"}); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("CheckScope(missing) = %v, want ErrTableNotFound", err)
	}
}

// TestDurability reads synchronous_commit and the standbys of a real primary
// with a streaming standby, asynchronous and then synchronous.
func TestDurability(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers")
	}
	ctx := testCtx(t)
	primary, err := consumertest.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	pool, err := pgxpool.New(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	d, err := ReadDurability(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if d.SynchronousCommit != "on" || len(d.Standbys) != 0 || len(d.Risks()) != 0 {
		t.Fatalf("alone: %+v, risks %v; want synchronous_commit on, no standby, no risk", d, d.Risks())
	}

	standby, err := primary.StartStandby()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	waitStandbys := func(state string) Durability {
		t.Helper()
		for range 200 {
			d, err := ReadDurability(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Standbys) == 1 && d.Standbys[0].SyncState == state {
				return d
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no standby with sync_state %q", state)
		return Durability{}
	}
	d = waitStandbys("async")
	eng, err := NewEngine(pool, Table{}, WithoutFirstPartitions())
	if err != nil {
		t.Fatal(err)
	}
	if ed, err := eng.Durability(ctx); err != nil || len(ed.Standbys) != 1 || len(ed.Risks()) != 1 {
		t.Fatalf("Engine.Durability = %+v, %v; want the async standby", ed, err)
	}
	if r := d.Risks(); len(r) != 1 || r[0].Reason != RiskAsyncStandby || !strings.Contains(r[0].Message, "standby") {
		t.Fatalf("async standby: risks %v, want one %s", r, RiskAsyncStandby)
	}

	if _, err := pool.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	d = waitStandbys("sync")
	if r := d.Risks(); len(r) != 0 {
		t.Fatalf("sync standby: risks %v, want none", r)
	}

	// synchronous_commit is per session: off risks a crash, and local stops
	// waiting for the synchronous standby.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	d, err = ReadDurability(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	r := d.Risks()
	if len(r) != 2 || r[0].Reason != RiskSynchronousCommitOff || r[1].Reason != RiskAsyncStandby {
		t.Fatalf("synchronous_commit off: risks %v, want %s and %s", r, RiskSynchronousCommitOff, RiskAsyncStandby)
	}
	if _, err := conn.Exec(ctx, `SET synchronous_commit = local`); err != nil {
		t.Fatal(err)
	}
	d, _ = ReadDurability(ctx, conn)
	if r := d.Risks(); len(r) != 1 || r[0].Reason != RiskAsyncStandby {
		t.Fatalf("synchronous_commit local: risks %v, want %s", r, RiskAsyncStandby)
	}
	_, _ = conn.Exec(ctx, `RESET synchronous_commit`)
}
