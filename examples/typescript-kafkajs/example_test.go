// Package typescriptkafkajs_test runs the TypeScript example (kafkajs +
// TypeORM + pg) against a dedup table made by the operator's dedup engine,
// PostgreSQL and the project's Kafka-protocol broker. See README.md.
package typescriptkafkajs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

const (
	topic      = "payments"
	dlqTopic   = "payments.dlq"
	partitions = 4
	uniqueIDs  = 600
	duplicates = 200 // 25% of the 800 valid records
	// The two services (consumer groups) sharing one ConsumerGroup-scoped table.
	billing = "billing"
	rewards = "rewards"
	// The n-th charge of billing at which the first billing process is killed.
	killAt = 150
)

// table is the dedup table, as an IdempotentConsumer with schema billing
// would have the operator create it.
var table = dedup.Table{Schema: "billing", Name: "processed_event", Scope: dedup.ScopeConsumerGroup, Interval: dedup.Daily}

// record is one produced record.
type record struct {
	id        string // "" for the undecodable ones
	partition int
	value     []byte
}

// TestTypeScriptConsumer builds the example, creates the dedup table with the
// operator's engine and runs node consumers of two groups on it:
//   - 600 events produced as 800 records (25% duplicates, half of them on
//     another partition than the original), plus an out-of-window id, a UUID v4
//     id, a non-JSON value and a value without an id in the middle of
//     partition 0;
//   - billing: its first process is kill -9ed while the provider holds its
//     150th charge (after the charge, before the database commit), then two
//     processes finish the topic; rewards: one process, at the same time;
//   - each group charged every event exactly once and wrote one ledger row
//     per event; billing dead-lettered the four bad records, rewards the two
//     undecodable ones (it skips the others by policy); partition 0 went past
//     them;
//   - a replay (a new billing run with offsets reset to earliest) charges and
//     writes nothing new.
func TestTypeScriptConsumer(t *testing.T) {
	node, npm := requireNode(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The build runs while PostgreSQL and the broker start.
	type built struct {
		dir string
		err error
	}
	build := make(chan built, 1)
	tmp := t.TempDir()
	go func() {
		dir, err := buildExample(ctx, node, npm, tmp)
		build <- built{dir, err}
	}()
	var dir string
	received := false
	waitBuild := func() string {
		if !received {
			b := <-build
			received = true
			if b.err != nil {
				t.Fatalf("building the example: %v", b.err)
			}
			dir = b.dir
			t.Logf("example built at %s", time.Since(start).Round(time.Millisecond))
		}
		return dir
	}
	defer func() { // a test that fails before the build is done waits for it
		if !received {
			cancel()
			<-build
		}
	}()

	// PostgreSQL, and the table made by the same engine the operator uses.
	dsn := consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer pool.Close()
	// The table is made by cmd/dedupctl, as on a machine without
	// Kubernetes: no operator, no envtest (docs/dedupctl.md).
	ctl := buildDedupctl(t, ctx, tmp, dsn)
	if out := ctl.run("create", "--schema", table.Schema, "--table", table.Name, "--scope", string(table.Scope),
		"--interval", string(table.Interval), "--premake", "2"); !strings.Contains(out, "ready") {
		t.Fatalf("dedupctl create: %s", out)
	}
	windowBefore := ctl.window()
	ledgerSQL, err := os.ReadFile("sql/ledger.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, string(ledgerSQL)); err != nil {
		t.Fatalf("creating the ledger: %v", err)
	}
	claimFn := table.ClaimOneFunction() // what the operator publishes

	// The broker, the topics and the records.
	brk := startBroker(t)
	if err := brk.createTopic(ctx, topic, partitions); err != nil {
		t.Fatal(err)
	}
	if err := brk.createTopic(ctx, dlqTopic, 1); err != nil {
		t.Fatal(err)
	}
	recs, ids, outsideID, v4ID := makeRecords(t)
	produce(t, ctx, brk, recs)
	valid := 0
	for _, r := range recs {
		if ids[r.id] {
			valid++
		}
	}
	t.Logf("setup done in %s: %d records, %d valid (%d unique ids), 4 bad", time.Since(start).Round(time.Millisecond), len(recs), valid, len(ids))

	// The TypeORM pitfall, on this table and the locked TypeORM version.
	pit := runPitfall(t, node, waitBuild(), map[string]string{
		"DATABASE_URL": dsn, "DEDUP_TABLE": table.String(), "EVENT_ID": newV7(time.Now()),
	})
	if pit["rightFirst"]["raw"] != 1 || pit["rightDuplicate"]["raw"] != 0 || pit["wrongDuplicate"]["identifiers"] != 1 {
		t.Errorf("pitfall.js: got %v; docs/any-language.md says a duplicate insert has raw.length 0 with .returning() (1 for a new one) and identifiers.length 1 without", pit)
	}

	prov := newProvider(t)
	env := func(group, name string, extra ...string) map[string]string {
		e := map[string]string{
			"KAFKA_BROKERS":            strings.Join(brk.addrs, ","),
			"KAFKA_TOPIC":              topic,
			"KAFKA_GROUP_ID":           group,
			"DEAD_LETTER_TOPIC":        dlqTopic,
			"DATABASE_URL":             dsn,
			"DEDUP_CLAIM_ONE_FUNCTION": claimFn,
			"CHARGE_URL":               prov.url(group),
			"SESSION_TIMEOUT_MS":       "5000",
		}
		for i := 0; i+1 < len(extra); i += 2 {
			e[extra[i]] = extra[i+1]
		}
		return e
	}
	// lag reports whether group has committed every record; else, as the
	// error, how many it has not (the last one shows in a timeout).
	lag := func(group string) (bool, error) {
		l, err := brk.lag(ctx, group, topic, partitions)
		if err == nil && l > 0 {
			err = fmt.Errorf("%s has %d records not committed", group, l)
		}
		return err == nil, err
	}

	// Phase 1: both groups; billing's first process dies by kill -9 while
	// the provider holds a charge it has applied.
	hold := prov.holdNth(billing, killAt)
	a1 := startProc(t, node, dir, "billing-1", env(billing, "billing-1"))
	// rewards skips what billing dead-letters: both policies run.
	b1 := startProc(t, node, dir, "rewards-1", env(rewards, "rewards-1", "ON_OUTSIDE_WINDOW", "skip", "ON_NOT_V7", "skip"))
	var heldKey string
	select {
	case heldKey = <-hold.held:
	case <-time.After(2 * time.Minute):
		t.Fatalf("billing-1 never made charge %d\n%s", killAt, a1.tail(4000))
	}
	a1.kill9()
	close(hold.release)
	t.Logf("kill -9 of billing-1 while charge %d (%s) was held, at %s", killAt, heldKey, time.Since(start).Round(time.Millisecond))
	a2 := startProc(t, node, dir, "billing-2", env(billing, "billing-2"))
	a3 := startProc(t, node, dir, "billing-3", env(billing, "billing-3"))
	waitFor(t, 3*time.Minute, "billing and rewards to commit every record", func() (bool, error) {
		ok1, err := lag(billing)
		if err != nil || !ok1 {
			return false, err
		}
		return lag(rewards)
	})
	t.Logf("both groups done at %s", time.Since(start).Round(time.Millisecond))

	// Each group: every unique id charged, none lost, none extra; one ledger
	// row and one dedup row per id.
	for _, g := range []string{billing, rewards} {
		reqs := prov.snapshot(g)
		checkCharged(t, g, reqs, ids)
		checkRows(t, ctx, pool, g, len(ids))
		again := keysRequestedMoreThanOnce(reqs)
		switch g {
		case rewards:
			if len(again) != 0 {
				t.Errorf("rewards (no crash) applied %d events more than once up to the charge: %v", len(again), again)
			}
		case billing:
			// The held charge was applied by billing-1, whose transaction died
			// with it: the claim rolled back, so a survivor applied the event
			// again and sent the same key. Nothing else may repeat but the
			// other partition billing-1 was working on at the kill.
			if reqs[heldKey] != 2 {
				t.Errorf("billing: the charge held at the kill (%s) was requested %d times; want 2 (once by the killed process, once by its successor with the same Idempotency-Key)", heldKey, reqs[heldKey])
			}
			if len(again) > 2 {
				t.Errorf("billing: %d events were applied again after the kill -9, more than the 2 partitions a process works on at once: %v", len(again), again)
			}
		}
	}
	// Partition 0 went past its bad records: every valid record after them
	// was charged by both groups.
	past := 0
	seenBad := false
	for _, r := range recs {
		if r.partition != 0 {
			continue
		}
		if r.id == outsideID {
			seenBad = true
			continue
		}
		if seenBad && ids[r.id] {
			past++
			for _, g := range []string{billing, rewards} {
				if prov.snapshot(g)[r.id] == 0 {
					t.Errorf("%s: %s, after the out-of-window id on partition 0, was never charged: the partition stalled", g, r.id)
				}
			}
		}
	}
	if past == 0 {
		t.Fatal("test setup: no valid record after the bad ones on partition 0")
	}

	// Phase 2: a replay. Every process stops; a new billing run resets the
	// group's offsets to earliest and reads the whole topic again.
	before := prov.snapshot(billing)
	stopAll(t, a2, a3, b1)
	r1 := startProc(t, node, dir, "billing-replay", env(billing, "billing-replay", "RESET_OFFSETS", "earliest"))
	waitFor(t, 30*time.Second, "the replay to reset billing's offsets", func() (bool, error) { return r1.logged("offsets reset to earliest"), nil })
	waitFor(t, 2*time.Minute, "the replay to commit every record", func() (bool, error) { return lag(billing) })
	r1.stop(t)
	counts := r1.lastCounts()
	// At least: a rebalance (a slow heartbeat on a loaded machine) may
	// deliver a record twice.
	if counts["duplicate"] < valid || counts["new"] != 0 {
		t.Errorf("replay: verdict counts %v; want duplicate >= %d (every valid record) and no new", counts, valid)
	}
	after := prov.snapshot(billing)
	if n := totalRequests(after) - totalRequests(before); n != 0 {
		t.Errorf("replay: %d new charge requests, want 0", n)
	}
	checkRows(t, ctx, pool, billing, len(ids))

	// Dead letters: billing sent the four bad records (twice: the replay
	// sends them again), rewards the two undecodable ones and skipped the
	// other two, with the Go runtime's headers, and nothing else.
	if c := b1.lastCounts(); c["skip:outside_window"] != 1 || c["skip:not_v7"] != 1 {
		t.Errorf("rewards: counts %v; want skip:outside_window=1 and skip:not_v7=1", c)
	}
	dl := readDeadLetters(t, ctx, brk)
	wants := map[string]map[string]string{
		billing: {"outside_window": outsideID, "not_v7": v4ID, "not_json": "", "missing_id": ""},
		rewards: {"not_json": "", "missing_id": ""},
	}
	for g, want := range wants {
		for reason, id := range want {
			got := dl[g][reason]
			if len(got) == 0 {
				t.Errorf("%s: no dead letter with reason %s", g, reason)
			}
			for _, gotID := range got {
				if gotID != id {
					t.Errorf("%s: dead letter %s has dlq-event-id %q, want %q", g, reason, gotID, id)
				}
			}
		}
		for reason := range dl[g] {
			if _, ok := want[reason]; !ok {
				t.Errorf("%s: unexpected dead letters with reason %s: %v", g, reason, dl[g][reason])
			}
		}
	}
	if n := len(dl[billing]["outside_window"]); n < 2 {
		t.Errorf("billing: %d outside_window dead letters; want at least 2 (the first run and the replay)", n)
	}

	// Maintenance, run as a cron job would two days from now, moves the
	// window on by two days.
	ctl.run("maintain", "--schema", table.Schema, "--table", table.Name, "--premake", "2",
		"--now", time.Now().Add(48*time.Hour).UTC().Format(time.RFC3339))
	windowAfter := ctl.window()
	if windowAfter.To.Sub(windowBefore.To) != 48*time.Hour {
		t.Errorf("dedupctl maintain two days on: window %s -> %s; want its end two days later", windowBefore, windowAfter)
	}
	t.Logf("dedupctl maintain: window %s -> %s", windowBefore, windowAfter)
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// makeRecords returns the records to produce (in order), the set of valid
// unique ids, the out-of-window id and the UUID v4 id.
func makeRecords(t *testing.T) (recs []record, ids map[string]bool, outsideID, v4ID string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(14, 2))
	ids = map[string]bool{}
	type placed struct {
		id        string
		partition int
		value     []byte
	}
	var firsts []placed
	body := func(id string, i int) []byte {
		b, _ := json.Marshal(map[string]any{
			"eventId": id, "type": "charge.requested", "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
			"account": fmt.Sprintf("acct-%d", i%50), "amountCents": 100 + i,
		})
		return b
	}
	// Which of the valid records are duplicates (none first). A
	// duplicate copies an earlier record, on its partition or (every other
	// one) on another (a producer retry after a partition change, or two
	// producers of one event).
	isDup := make([]bool, uniqueIDs+duplicates)
	for i := 0; i < duplicates; i++ {
		isDup[len(isDup)-1-i] = true
	}
	rng.Shuffle(len(isDup)-1, func(i, j int) { isDup[i+1], isDup[j+1] = isDup[j+1], isDup[i+1] })
	valid := make([]record, 0, len(isDup))
	for i, dup := range isDup {
		if !dup {
			id := newV7(time.Now())
			ids[id] = true
			p := rng.IntN(partitions)
			firsts = append(firsts, placed{id, p, body(id, i)})
			valid = append(valid, record{id: id, partition: p, value: firsts[len(firsts)-1].value})
			continue
		}
		src := firsts[rng.IntN(len(firsts))]
		p := src.partition
		if len(valid)%2 == 1 {
			p = (p + 1 + rng.IntN(partitions-1)) % partitions
		}
		valid = append(valid, record{id: src.id, partition: p, value: src.value})
	}
	outsideID = newV7(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	v4ID = uuid.NewString()
	bad := []record{
		{id: outsideID, partition: 0, value: body(outsideID, 1)},
		{id: v4ID, partition: 0, value: body(v4ID, 2)},
		{partition: 0, value: []byte("not json at all")},
		{partition: 0, value: []byte(`{"type":"charge.requested","amountCents":5}`)},
	}
	mid := len(valid) / 2
	recs = append(append(append(recs, valid[:mid]...), bad...), valid[mid:]...)
	return recs, ids, outsideID, v4ID
}

// newV7 returns a UUID v7 (canonical text) with the timestamp of at.
func newV7(at time.Time) string {
	u := uuid.Must(uuid.NewV7())
	ms := at.UnixMilli()
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u.String()
}

func produce(t *testing.T, ctx context.Context, brk *broker, recs []record) {
	t.Helper()
	produceTo(t, ctx, brk, topic, recs)
}

// produceTo produces recs to name, each to its partition.
func produceTo(t *testing.T, ctx context.Context, brk *broker, name string, recs []record) {
	t.Helper()
	w := brk.writer(name)
	defer w.Close()
	msgs := make([]kafka.Message, len(recs))
	for i, r := range recs {
		msgs[i] = kafka.Message{Partition: r.partition, Value: r.value}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// checkCharged compares the keys charged for group with the valid ids.
func checkCharged(t *testing.T, group string, reqs map[string]int, ids map[string]bool) {
	t.Helper()
	var missing, extra []string
	for id := range ids {
		if reqs[id] == 0 {
			missing = append(missing, id)
		}
	}
	for id := range reqs {
		if !ids[id] {
			extra = append(extra, id)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		sort.Strings(missing)
		sort.Strings(extra)
		t.Errorf("%s: %d of %d events never charged (lost), %d charges for ids that are not valid events; first lost: %v, first extra: %v",
			group, len(missing), len(ids), len(extra), first(missing, 5), first(extra, 5))
	}
}

// checkRows checks one ledger row and one dedup row per event for group.
func checkRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, group string, want int) {
	t.Helper()
	var rows, distinct, dedupRows int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM ledger WHERE consumer_group = $1`, group).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table.String()+` WHERE consumer_group = $1`, group).Scan(&dedupRows); err != nil {
		t.Fatal(err)
	}
	if rows != want || distinct != want || dedupRows != want {
		t.Errorf("%s: %d ledger rows for %d distinct events and %d dedup rows; want %d of each (one per event)", group, rows, distinct, dedupRows, want)
	}
}

func keysRequestedMoreThanOnce(reqs map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range reqs {
		if n > 1 {
			out[k] = n
		}
	}
	return out
}

func totalRequests(reqs map[string]int) int {
	n := 0
	for _, v := range reqs {
		n += v
	}
	return n
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// readDeadLetters reads the whole dead-letter topic: group -> reason -> the
// dlq-event-id header of each dead letter ("" when absent).
func readDeadLetters(t *testing.T, ctx context.Context, brk *broker) map[string]map[string][]string {
	t.Helper()
	ends, err := brk.endOffsets(ctx, dlqTopic, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	if ends[0] == 0 {
		return out
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brk.addrs, Topic: dlqTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("reading %s: %v", dlqTopic, err)
		}
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		if h["dlq-original-topic"] != topic || h["dlq-original-partition"] != "0" {
			t.Errorf("dead letter at offset %d: original %s/%s, want %s/0", m.Offset, h["dlq-original-topic"], h["dlq-original-partition"], topic)
		}
		if _, err := strconv.ParseInt(h["dlq-original-offset"], 10, 64); err != nil {
			t.Errorf("dead letter at offset %d: dlq-original-offset %q", m.Offset, h["dlq-original-offset"])
		}
		g := h["dlq-consumer-group"]
		if out[g] == nil {
			out[g] = map[string][]string{}
		}
		out[g][h["dlq-reason"]] = append(out[g][h["dlq-reason"]], h["dlq-event-id"])
		if m.Offset+1 >= ends[0] {
			return out
		}
	}
}
