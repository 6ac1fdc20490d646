package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// replayRun runs one replay with a Consumer of its own (the live one's config).
func (e *env) replayRun(t *testing.T, spec replay.Spec) replay.Result {
	t.Helper()
	return e.replayRunWith(t, spec)
}

// replayRunWith is replayRun with the config changed by mods.
func (e *env) replayRunWith(t *testing.T, spec replay.Spec, mods ...func(*consumer.Config)) replay.Result {
	t.Helper()
	c, err := consumer.New(e.config(mods...), e.handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Replay(ctx, spec)
	if err != nil {
		t.Fatalf("replay %s: %v", spec.ID, err)
	}
	return res
}

// TestReplay_DryRunApplyResumeAndPark: a dry run counts the selection and
// changes nothing; an apply takes each fixed dead letter once through the
// live pipeline (dedup claim under the live group), writes the one that
// fails again back with its original headers and dlq-replays, and never
// touches the live group's offsets; running it again does nothing and reports
// the same counts; a record at its replay limit is parked.
func TestReplay_DryRunApplyResumeAndPark(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ids := make([]uuid.UUID, 6)
	for i := range ids {
		ids[i] = newID(t)
		if i < 4 {
			e.failIDs.Store(ids[i], consumer.Permanent(errors.New("ledger refused")))
		}
		e.kafka.Produce(t, e.topic, event(ids[i], 0, ""))
	}
	r := e.start(e.config(), nil)
	e.waitCaughtUp(t, 30*time.Second)
	readAll(t, e.kafka.Brokers(), e.dlq, 0, 4, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	committedBefore, err := e.committed(ctx)
	if err != nil {
		t.Fatal(err)
	}

	dry := e.replayRun(t, replay.Spec{ID: "dry1", Mode: replay.ModeDryRun})
	if dry.Selected != 4 || dry.ByReason[consumer.ReasonHandlerFailed] != 4 || dry.Duplicates != 0 || !dry.Complete {
		t.Fatalf("dry run: %+v", dry)
	}
	var rows int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+"processed_event_offsets"+` WHERE topic LIKE '%@replay/%'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("the dry run wrote %d rows", rows)
	}
	// By event id and by key (none matches the key).
	if got := e.replayRun(t, replay.Spec{ID: "dry2", Mode: replay.ModeDryRun, Selection: replay.Selection{EventIDs: []string{ids[1].String()}}}); got.Selected != 1 {
		t.Fatalf("dry run by event id selected %d, want 1", got.Selected)
	}
	k := "nokey"
	if got := e.replayRun(t, replay.Spec{ID: "dry3", Mode: replay.ModeDryRun, Selection: replay.Selection{Key: &k}}); got.Selected != 0 {
		t.Fatalf("dry run by key selected %d, want 0", got.Selected)
	}

	// The bug is fixed for three of the four.
	for _, id := range ids[1:4] {
		e.failIDs.Delete(id)
	}
	res := e.replayRun(t, replay.Spec{ID: "r1", Mode: replay.ModeApply})
	want := replay.Counts{Selected: 4, Applied: 3, FailedAgain: 1}
	if res.Counts != want || !res.Complete {
		t.Fatalf("apply: %+v, want counts %+v", res, want)
	}
	if rows, distinct := e.effects(t); rows != 5 || distinct != 5 {
		t.Fatalf("effects: %d rows, %d ids; want 5, 5", rows, distinct)
	}
	dlq := readAll(t, e.kafka.Brokers(), e.dlq, 0, 5, 20*time.Second)
	back := dlq[4]
	if header(back, "dlq-replays") != "1" || header(back, "dlq-replay-id") != "r1" || header(back, "dlq-original-topic") != e.topic ||
		header(back, "dlq-original-offset") != "0" || header(back, "dlq-event-id") != ids[0].String() || header(back, "dlq-reason") != "handler_failed" {
		t.Fatalf("written back with headers %v", back.Headers)
	}

	// Again: nothing more happens, the same counts.
	if again := e.replayRun(t, replay.Spec{ID: "r1", Mode: replay.ModeApply}); again.Counts != want || !again.Complete {
		t.Fatalf("apply again: %+v", again)
	}
	if rows, _ := e.effects(t); rows != 5 {
		t.Fatalf("effects after the second run: %d", rows)
	}

	// A replay with a limit of 2 of the copy (dead-lettered after the
	// originals; replays 1) parks it.
	after, err := time.Parse(time.RFC3339Nano, header(dlq[3], "dlq-time"))
	if err != nil {
		t.Fatal(err)
	}
	after = after.Add(time.Microsecond)
	res2 := e.replayRun(t, replay.Spec{ID: "r2", Mode: replay.ModeApply, MaxReplays: 2,
		Selection: replay.Selection{EventIDs: []string{ids[0].String()}, DeadLetteredAfter: &after}})
	if want := (replay.Counts{Selected: 1, Parked: 1}); res2.Counts != want {
		t.Fatalf("second replay: %+v, want %+v", res2.Counts, want)
	}
	dlq = readAll(t, e.kafka.Brokers(), e.dlq, 0, 6, 20*time.Second)
	parked := 0
	for _, m := range dlq[5:] {
		if header(m, "dlq-reason") == "parked" {
			parked++
			if header(m, "dlq-parked-reason") != "handler_failed" || header(m, "dlq-replays") != "2" {
				t.Fatalf("parked with headers %v", m.Headers)
			}
		}
	}
	if parked != 1 {
		t.Fatalf("%d parked records, want 1", parked)
	}
	// Parked records are out of the default selection.
	if got := e.replayRun(t, replay.Spec{ID: "dry4", Mode: replay.ModeDryRun, Selection: replay.Selection{Reasons: []consumer.Reason{"parked"}}}); got.Selected != 1 {
		t.Fatalf("parked selected %d, want 1", got.Selected)
	}

	committedAfter, err := e.committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if committedAfter[0] != committedBefore[0] {
		t.Fatalf("the live group's committed offset moved: %v -> %v", committedBefore, committedAfter)
	}
	var live int64
	if err := e.pool.QueryRow(ctx, `SELECT next_offset FROM `+"processed_event_offsets"+` WHERE topic = $1 AND kafka_partition = 0`, e.topic).Scan(&live); err != nil || live != 6 {
		t.Fatalf("the live group's position: %d, %v; want 6", live, err)
	}

	list, err := consumer.ListDeadLetters(ctx, e.config(), replay.Selection{EventIDs: []string{ids[0].String()}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].OriginalTopic != e.topic || list[1].Replays != 1 {
		t.Fatalf("listed %+v", list)
	}
}
