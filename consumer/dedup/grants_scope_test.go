package dedup

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestConsumerRoleLaterPartitions: a partition Maintain creates after the
// grant is usable by the consumer's role at once (privileges are checked on
// the parent the statement names), and gets no privilege of its own, so the
// role still cannot touch it directly.
func TestConsumerRoleLaterPartitions(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	r.grant(t, "g1")
	later := r.now.Add(10 * 24 * time.Hour)
	mres, err := r.eng.Maintain(ctx, later, r.premake, r.retention)
	if err != nil {
		t.Fatalf("Maintain later: %v", err)
	}
	if len(mres.Created) == 0 {
		t.Fatal("Maintain later created nothing")
	}
	newest := mres.Created[len(mres.Created)-1]
	in, err := NewInserter(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	id := idAt(newest.From.Add(time.Hour))
	if got := insertCommit(t, r.consDB, in, id); !got.Fresh[0] {
		t.Fatalf("insert into the partition made after the grant: %+v (window %v)", got, got.Window)
	}
	var where string
	if err := r.admin.QueryRow(ctx, `SELECT tableoid::regclass::text FROM app.processed_event WHERE event_id = $1`, id).Scan(&where); err != nil || where != "app."+newest.Name {
		t.Fatalf("row landed in %q (%v), want app.%s", where, err, newest.Name)
	}
	if code, msg, _ := sqlstate(t, r.consDB, `SELECT 1 FROM app.`+newest.Name); code != "42501" {
		t.Errorf("direct SELECT on the new partition: %q %s, want 42501", code, msg)
	}
	// A second grant finds everything in place: no statement, no lock.
	if res := r.grant(t, "g1"); len(res.Statements) != 0 {
		t.Errorf("second grant ran %v, want nothing", res.Statements)
	}
}

// TestConsumerRoleGlobalScope: under ScopeGlobal the key is the event id
// alone: every group sees every row (an id any group recorded is a
// duplicate for all), so no policy is put on the dedup table; positions are
// still per group.
func TestConsumerRoleGlobalScope(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeGlobal)
	other, err := NewInserter(r.tbl, "g2")
	if err != nil {
		t.Fatal(err)
	}
	otherID := idAt(r.now)
	insertCommit(t, r.ownerDB, other, otherID)
	res := r.grant(t, "g1")
	for _, s := range res.Statements {
		if strings.Contains(s, "ON app.processed_event ") && strings.Contains(s, "POLICY") {
			t.Errorf("a policy on the Global dedup table: %s", s)
		}
	}
	in, err := NewInserter(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if got := insertCommit(t, r.consDB, in, otherID); got.Fresh[0] {
		t.Fatalf("g2's id is fresh for g1 under scope Global: %+v", got)
	}
	if code, msg, _ := sqlstate(t, r.consDB, `INSERT INTO app.processed_event_offsets (consumer_group, topic, kafka_partition, next_offset) VALUES ('g2', 'events', 1, 0)`); code != "42501" {
		t.Errorf("a position of another group under scope Global: %q %s, want 42501", code, msg)
	}
	for _, c := range []string{`DROP TABLE app.processed_event`, `TRUNCATE app.processed_event`, `COMMENT ON TABLE app.processed_event IS NULL`} {
		if code, msg, _ := sqlstate(t, r.consDB, c); code != "42501" {
			t.Errorf("%s: %q %s, want 42501", c, code, msg)
		}
	}
	pos, err := NewPositions(r.tbl, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pos.Record(ctx, r.consDB, "events", 0, 3); err != nil {
		t.Fatalf("recording a position: %v", err)
	}
}

// TestConsumerRoleSharedByGroups: one role for two groups gets both
// groups' rows (the policies add up) and no third group's.
func TestConsumerRoleSharedByGroups(t *testing.T) {
	r := newRoles(t, ScopeConsumerGroup)
	r.grant(t, "g1")
	r.grant(t, "g3")
	for _, g := range []string{"g1", "g3"} {
		in, err := NewInserter(r.tbl, g)
		if err != nil {
			t.Fatal(err)
		}
		if got := insertCommit(t, r.consDB, in, idAt(r.now)); !got.Fresh[0] {
			t.Errorf("group %s: %+v", g, got)
		}
	}
	if code, msg, _ := sqlstate(t, r.consDB, `INSERT INTO app.processed_event (event_id, consumer_group) VALUES ($1, 'g2')`, idAt(r.now)); code != "42501" {
		t.Errorf("a third group's row: %q %s, want 42501", code, msg)
	}
}

// TestConsumerRoleClaimFunction: with EXECUTE taken from PUBLIC, the
// consumer's role may call the table's claim function only after the grant,
// and then only for its own group (the function runs with the caller's
// rights, so the group policy holds inside it too).
func TestConsumerRoleClaimFunction(t *testing.T) {
	ctx := testCtx(t)
	r := newRoles(t, ScopeConsumerGroup)
	var installed bool
	if err := r.ownerDB.QueryRow(ctx, `SELECT to_regprocedure('app.processed_event_claim(uuid[], text)') IS NOT NULL`).Scan(&installed); err != nil {
		t.Fatal(err)
	}
	if !installed {
		t.Fatal("EnsureTable installed no claim function")
	}
	if _, err := r.ownerDB.Exec(ctx, `REVOKE EXECUTE ON FUNCTION app.processed_event_claim(uuid[], text), app.processed_event_claim_one(uuid, text) FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	id := idAt(r.now)
	claim := `SELECT verdict FROM app.processed_event_claim(ARRAY[$1::uuid], $2)`
	if code, msg, _ := sqlstate(t, r.consDB, claim, id, "g1"); code != "42501" {
		t.Fatalf("claim before the grant: %q %s, want 42501", code, msg)
	}
	res := r.grant(t, "g1")
	granted := 0
	for _, s := range res.Statements {
		if strings.HasPrefix(s, "GRANT EXECUTE ON FUNCTION") {
			granted++
		}
	}
	if granted != 2 {
		t.Errorf("EXECUTE granted on %d claim functions, want 2: %v", granted, res.Statements)
	}
	var verdicts []string
	for range 2 {
		var v string
		if err := pgx.BeginFunc(ctx, r.consDB, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT app.processed_event_claim_one($1, 'g1')`, id).Scan(&v)
		}); err != nil {
			t.Fatalf("claim as the consumer: %v", err)
		}
		verdicts = append(verdicts, v)
	}
	if !slices.Equal(verdicts, []string{"new", "duplicate"}) {
		t.Errorf("verdicts %v, want [new duplicate]", verdicts)
	}
	if code, msg, _ := sqlstate(t, r.consDB, claim, idAt(r.now), "g2"); code != "42501" {
		t.Errorf("claim for another group: %q %s, want 42501", code, msg)
	}
}
