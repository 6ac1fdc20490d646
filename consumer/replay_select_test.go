package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// deadLetterAll runs the live consumer over msgs with every id in failing
// rejected (a permanent error), waits for want dead letters, stops it and
// fixes the "bug": the ids in failing succeed from now on.
func (e *env) deadLetterAll(t *testing.T, failing []uuid.UUID, want int, msgs ...kafka.Message) []kafka.Message {
	t.Helper()
	for _, id := range failing {
		e.failIDs.Store(id, consumer.Permanent(errors.New("ledger refused")))
	}
	e.kafka.Produce(t, e.topic, msgs...)
	r := e.start(e.config(), nil)
	e.waitCaughtUp(t, 30*time.Second)
	dlq := readAll(t, e.kafka.Brokers(), e.dlq, 0, want, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, id := range failing {
		e.failIDs.Delete(id)
	}
	return dlq
}

// effectIDs are the ids among of with an effect row, and the rows' count.
func (e *env) effectIDs(t *testing.T, of []uuid.UUID) (ids []uuid.UUID, rows int) {
	t.Helper()
	r, err := e.pool.Query(context.Background(), `SELECT event_id FROM effect WHERE event_id = ANY($1) ORDER BY event_id`, of)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var id uuid.UUID
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		rows++
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return ids, rows
}

// checkSelection runs sel as a dry run, which must count exactly want (and
// apply nothing), then as an apply, which must apply exactly want, once
// each, and nothing else of all.
func (e *env) checkSelection(t *testing.T, name string, sel replay.Selection, all, want []uuid.UUID) {
	t.Helper()
	n := int64(len(want))
	dry := e.replayRun(t, replay.Spec{ID: name + "-dry", Mode: replay.ModeDryRun, Selection: sel})
	if dry.Counts != (replay.Counts{Selected: n}) || !dry.Complete {
		t.Fatalf("%s: dry run %+v, want selected=%d and nothing else", name, dry, n)
	}
	if got, _ := e.effectIDs(t, all); len(got) != 0 {
		t.Fatalf("%s: the dry run applied %d ids", name, len(got))
	}
	res := e.replayRun(t, replay.Spec{ID: name, Mode: replay.ModeApply, Selection: sel})
	if res.Counts != (replay.Counts{Selected: n, Applied: n}) || !res.Complete {
		t.Fatalf("%s: apply %+v, want selected=applied=%d", name, res, n)
	}
	got, rows := e.effectIDs(t, all)
	wantSorted := slices.Clone(want)
	slices.SortFunc(wantSorted, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	if rows != len(want) || !slices.Equal(got, wantSorted) {
		t.Fatalf("%s: applied %v (%d rows), want exactly %v", name, got, rows, wantSorted)
	}
}

func ids(t *testing.T, n int) []uuid.UUID {
	out := make([]uuid.UUID, n)
	for i := range out {
		out[i] = newID(t)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// TestReplay_SelectByPartitionAndOffsets: original partitions with offset
// ranges (closed, open below, open above) pick exactly their dead letters.
func TestReplay_SelectByPartitionAndOffsets(t *testing.T) {
	e := newEnv(t, withPartitions(3))
	e.dumpLogsOnFailure(t)
	all := ids(t, 12) // offsets 0..3 of partitions 0, 1, 2
	var msgs []kafka.Message
	for i, id := range all {
		msgs = append(msgs, event(id, i/4, ""))
	}
	e.deadLetterAll(t, all, len(all), msgs...)
	sel := replay.Selection{Partitions: []replay.PartitionRange{
		{Partition: 0, ToOffset: ptr[int64](1)},                            // offsets 0, 1
		{Partition: 2, FromOffset: ptr[int64](1), ToOffset: ptr[int64](2)}, // 1, 2
		{Partition: 1, FromOffset: ptr[int64](3)},                          // 3
	}}
	e.checkSelection(t, "partitions", sel, all, []uuid.UUID{all[0], all[1], all[9], all[10], all[7]})
}

// TestReplay_SelectByMaxCount: maxCount takes the first dead letters in the
// dead-letter topic's order, in the dry run and in the apply alike.
func TestReplay_SelectByMaxCount(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	all := ids(t, 7)
	var msgs []kafka.Message
	for _, id := range all {
		msgs = append(msgs, event(id, 0, ""))
	}
	dlq := e.deadLetterAll(t, all, len(all), msgs...)
	var first []uuid.UUID
	for _, m := range dlq[:4] {
		first = append(first, uuid.MustParse(header(m, consumer.HeaderDLQEventID)))
	}
	e.checkSelection(t, "maxcount", replay.Selection{MaxCount: 4}, all, first)
}

// TestReplay_SelectByKey: only the dead letters whose record had the key.
func TestReplay_SelectByKey(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	all := ids(t, 6)
	var msgs []kafka.Message
	var want []uuid.UUID
	for i, id := range all {
		m := event(id, 0, "")
		m.Key = []byte(fmt.Sprintf("account-%d", i%3))
		if i%3 == 1 {
			want = append(want, id)
		}
		msgs = append(msgs, m)
	}
	e.deadLetterAll(t, all, len(all), msgs...)
	e.checkSelection(t, "key", replay.Selection{Key: ptr("account-1")}, all, want)
}

// TestReplay_SelectByEventIDs: only the named ids, in any case of hex.
func TestReplay_SelectByEventIDs(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	all := ids(t, 5)
	var msgs []kafka.Message
	for _, id := range all {
		msgs = append(msgs, event(id, 0, ""))
	}
	e.deadLetterAll(t, all, len(all), msgs...)
	sel := replay.Selection{EventIDs: []string{all[1].String(), all[3].String(), newID(t).String()}}
	e.checkSelection(t, "ids", sel, all, []uuid.UUID{all[1], all[3]})
}

// TestReplay_SelectByDeadLetterTime: deadLetteredAfter <= dlq-time <
// deadLetteredBefore, each bound alone and both together.
func TestReplay_SelectByDeadLetterTime(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	all := ids(t, 6)
	// Three waves, dead-lettered apart in time.
	var cuts []time.Time
	for w := range 3 {
		wave := all[2*w : 2*w+2]
		e.deadLetterAll(t, wave, 2*w+2, event(wave[0], 0, ""), event(wave[1], 0, ""))
		if w < 2 {
			time.Sleep(20 * time.Millisecond)
			cuts = append(cuts, time.Now().UTC())
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Each selection runs on a topic where the earlier ones applied their
	// picks: the windows are disjoint.
	e.checkSelection(t, "before", replay.Selection{DeadLetteredBefore: &cuts[0]}, all, all[0:2])
	e.checkSelection(t, "between", replay.Selection{DeadLetteredAfter: &cuts[0], DeadLetteredBefore: &cuts[1]}, all[2:], all[2:4])
	e.checkSelection(t, "after", replay.Selection{DeadLetteredAfter: &cuts[1]}, all[4:], all[4:6])
}

// TestReplay_SelectByReasons: among dead letters of several reasons, a
// selection of reasons takes only theirs; an apply of the ones that still
// fail writes them back (failed again) and applies nothing.
func TestReplay_SelectByReasons(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	all := ids(t, 3)
	msgs := []kafka.Message{
		event(all[0], 0, ""),
		{Value: []byte("not json")},
		event(all[1], 0, ""),
		{Value: []byte(`{"type":"no id"}`)},
		event(all[2], 0, ""),
	}
	e.deadLetterAll(t, all, 5, msgs...)
	dry := e.replayRun(t, replay.Spec{ID: "reasons-dry", Mode: replay.ModeDryRun})
	wantBy := map[consumer.Reason]int64{consumer.ReasonHandlerFailed: 3, consumer.ReasonNotJSON: 1, consumer.ReasonMissingID: 1}
	if dry.Selected != 5 || fmt.Sprint(dry.ByReason) != fmt.Sprint(wantBy) {
		t.Fatalf("dry run of every reason: %+v, want by reason %v", dry, wantBy)
	}
	malformed := replay.Selection{Reasons: []consumer.Reason{consumer.ReasonNotJSON, consumer.ReasonMissingID}}
	d := e.replayRun(t, replay.Spec{ID: "malformed-dry", Mode: replay.ModeDryRun, Selection: malformed})
	if d.Counts != (replay.Counts{Selected: 2}) || len(d.ByReason) != 2 {
		t.Fatalf("dry run of the malformed: %+v", d)
	}
	a := e.replayRun(t, replay.Spec{ID: "malformed", Mode: replay.ModeApply, Selection: malformed})
	if a.Counts != (replay.Counts{Selected: 2, FailedAgain: 2}) || !a.Complete {
		t.Fatalf("apply of the malformed: %+v, want both failed again", a)
	}
	if got, _ := e.effectIDs(t, all); len(got) != 0 {
		t.Fatalf("replaying the malformed applied %v", got)
	}
	e.checkSelection(t, "handler", replay.Selection{Reasons: []consumer.Reason{consumer.ReasonHandlerFailed}}, all, all)
}
