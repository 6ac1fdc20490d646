package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/replay"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// The replay phase: during the live run a "bug" (CHECK constraints on the
// ledger) makes the SQL sink reject some ids with a permanent error, so the
// consumers dead-letter them (handler_failed). After the live run the bug is
// fixed for most of them (one constraint dropped), a dry run counts the dead
// letters, and an apply runs as `consumer replay` processes, the way the
// operator's Job runs it (REPLAY_SPEC, REPLAY_RESULT_FILE), kill -9ed at
// random moments and started again with the same id until it completes.
// The ids that stay broken fail again and are parked (maxReplays 1).
const (
	bugConstraint    = "chaos_bug"
	brokenConstraint = "chaos_bug_unfixed"
	replayApplyID    = "chaos-fix"
	replayDryID      = "chaos-dry"
	// replayKillMax bounds the random moment of each kill after a start;
	// the replay's rate makes its work last longer than all the kills can.
	replayKillMin = 200 * time.Millisecond
	replayKillMax = 1500 * time.Millisecond
)

// bug says which ids the ledger rejects: those whose 15th byte (random in a
// UUID v7; the 16th makes the amount) is below Fixable, and the Broken
// buckets after them, which the fix leaves broken.
type bug struct{ Fixable, Broken int }

type bugKind int

const (
	bugNone bugKind = iota
	bugFixable
	bugBroken
)

func (b bug) kind(id uuid.UUID) bugKind {
	switch x := int(id[14]); {
	case x < b.Fixable:
		return bugFixable
	case x < b.Fixable+b.Broken:
		return bugBroken
	}
	return bugNone
}

// ddl installs the bug in the ledger. The expressions are kind's.
func (b bug) ddl() []string {
	if b.Fixable <= 0 {
		return nil
	}
	out := []string{fmt.Sprintf(`ALTER TABLE ledger ADD CONSTRAINT %s CHECK (get_byte(uuid_send(event_id), 14) >= %d)`, bugConstraint, b.Fixable)}
	if b.Broken > 0 {
		out = append(out, fmt.Sprintf(`ALTER TABLE ledger ADD CONSTRAINT %s CHECK (get_byte(uuid_send(event_id), 14) NOT BETWEEN %d AND %d)`,
			brokenConstraint, b.Fixable, b.Fixable+b.Broken-1))
	}
	return out
}

// ReplayResult is what the replay phase observed.
type ReplayResult struct {
	WantKills int
	// DeadLetters are the dead-letter topic's handler_failed records before
	// the replay (every one is selected): FixableLetters of FixableIDs
	// distinct ids, BrokenLetters of ids that stay broken, and OtherFailed
	// of ids in no bug bucket (none expected).
	DeadLetters, FixableLetters, FixableIDs, BrokenLetters, OtherFailed int
	// AppliedBeforeFix: ids of the bug with a ledger row before the replay.
	AppliedBeforeFix int
	// DryRunEffects: ids whose ledger rows the dry run changed.
	DryRunEffects int
	Dry, Apply    replay.Result
	Runs, Kills   int
	// Lost counts fixable ids without a ledger row after the replay and
	// broken dead letters the replay did not park; DuplicatesApplied the
	// ledger rows beyond the first of any id after it.
	Lost, DuplicatesApplied int
	// Unexpected counts ids not dead-lettered for the fixable bug whose
	// ledger rows the replay changed.
	Unexpected  int
	WrongAmount int
	ParkedInDLQ int // distinct original positions the replay parked
}

// Violations lists the replay phase's broken invariants.
func (r *ReplayResult) Violations() []string {
	want := replay.Counts{Selected: int64(r.DeadLetters), Applied: int64(r.FixableIDs),
		Duplicates: int64(r.FixableLetters - r.FixableIDs), Parked: int64(r.BrokenLetters)}
	v := broken(
		invariant{r.FixableLetters == 0, "nothing was dead-lettered for the bug: nothing to replay"},
		invariant{r.OtherFailed != 0, fmt.Sprintf("%d handler_failed dead letters of ids outside the bug's buckets", r.OtherFailed)},
		invariant{r.AppliedBeforeFix != 0, fmt.Sprintf("%d ids of the bug had taken effect before the fix", r.AppliedBeforeFix)},
		invariant{!r.Dry.Complete || r.Dry.Counts != replay.Counts{Selected: int64(r.DeadLetters)},
			fmt.Sprintf("dry run: complete=%v counts %+v, want selected=%d and nothing else", r.Dry.Complete, r.Dry.Counts, r.DeadLetters)},
		invariant{r.DryRunEffects != 0, fmt.Sprintf("the dry run changed the ledger rows of %d ids", r.DryRunEffects)},
		invariant{!r.Apply.Complete, "the replay did not complete: " + r.Apply.Error},
		invariant{r.Apply.Counts != want, fmt.Sprintf("the replay's counts %+v, want %+v", r.Apply.Counts, want)},
		invariant{r.Kills < r.WantKills, fmt.Sprintf("the replay completed after %d kill -9s, fewer than %d", r.Kills, r.WantKills)},
		invariant{r.Lost != 0, fmt.Sprintf("%d dead letters of the bug neither took effect nor were parked", r.Lost)},
		invariant{r.DuplicatesApplied != 0, fmt.Sprintf("%d duplicate applications after the replay", r.DuplicatesApplied)},
		invariant{r.Unexpected != 0, fmt.Sprintf("the replay changed the ledger rows of %d ids it should not have", r.Unexpected)},
		invariant{r.WrongAmount != 0, fmt.Sprintf("%d replayed ledger rows with a wrong amount", r.WrongAmount)},
	)
	for i := range v {
		v[i] = "replay: " + v[i]
	}
	return v
}

// Print writes the findings and the replay's RESULT line.
func (r *ReplayResult) Print(w io.Writer) {
	fmt.Fprintf(w, "chaos: replay: %d dead letters of the bug (%d of %d fixed ids, %d still broken, %d other); dry run selected %d; apply in %d runs, %d kill -9s: %+v; %d positions parked\n",
		r.DeadLetters, r.FixableLetters, r.FixableIDs, r.BrokenLetters, r.OtherFailed, r.Dry.Selected, r.Runs, r.Kills, r.Apply.Counts, r.ParkedInDLQ)
	fmt.Fprintf(w, "RESULT replay dead_letters=%d applied=%d duplicates=%d parked=%d kills=%d lost=%d duplicates_applied=%d\n",
		r.DeadLetters, r.Apply.Applied, r.Apply.Duplicates, r.Apply.Parked, r.Kills, r.Lost, r.DuplicatesApplied)
}

// replayPhase fixes the bug and replays its dead letters; the findings go
// to h.res.Replay.
func (h *harness) replayPhase(ctx context.Context) error {
	rr := &ReplayResult{WantKills: h.o.ReplayKills}
	h.res.Replay = rr
	b := h.res.Bug
	dl, err := readDeadLetters(ctx, h.brokers, dlqTopic)
	if err != nil {
		return err
	}
	fixIDs := map[uuid.UUID]bool{}
	brokenPos := map[position]bool{}
	for _, d := range dl.all {
		if d.reason != string(consumer.ReasonHandlerFailed) {
			continue
		}
		rr.DeadLetters++
		k := bugNone
		if d.hasID {
			k = b.kind(d.id)
		}
		switch k {
		case bugFixable:
			rr.FixableLetters++
			fixIDs[d.id] = true
		case bugBroken:
			rr.BrokenLetters++
			brokenPos[d.pos] = true
		default:
			rr.OtherFailed++
		}
	}
	rr.FixableIDs = len(fixIDs)
	before, err := ledgerCounts(ctx, h.dbURL)
	if err != nil {
		return err
	}
	for id := range fixIDs {
		if before[id].n > 0 {
			rr.AppliedBeforeFix++
		}
	}

	h.step("replay phase: %d dead letters of the bug (%d ids fixed, %d dead letters still broken); fixing the bug", rr.DeadLetters, rr.FixableIDs, rr.BrokenLetters)
	if _, err := h.pool.Exec(ctx, `ALTER TABLE ledger DROP CONSTRAINT `+bugConstraint); err != nil {
		return fmt.Errorf("fixing the bug: %w", err)
	}
	sel := replay.Selection{Reasons: []event.Reason{consumer.ReasonHandlerFailed}}
	if rr.Dry, err = h.runReplay(ctx, "replay-dry", replay.Spec{ID: replayDryID, Mode: replay.ModeDryRun, Selection: sel}); err != nil {
		return err
	}
	afterDry, err := ledgerCounts(ctx, h.dbURL)
	if err != nil {
		return err
	}
	rr.DryRunEffects = changed(before, afterDry, nil)

	// The work lasts longer than all kills can take (each comes at most
	// replayKillMax after a start), so every kill lands before the end.
	work := time.Duration(h.o.ReplayKills+1) * replayKillMax
	spec := replay.Spec{ID: replayApplyID, Mode: replay.ModeApply, Selection: sel, MaxReplays: 1,
		RatePerSecond: max(1, float64(rr.DeadLetters)/work.Seconds())}
	h.step("replay phase: dry run selected %d; applying at %.0f/s with %d kill -9s of the replay process", rr.Dry.Selected, spec.RatePerSecond, h.o.ReplayKills)
	deadline := time.Now().Add(work + 3*time.Minute)
	for {
		rr.Runs++
		if time.Now().After(deadline) {
			return fmt.Errorf("the replay did not complete in %d runs", rr.Runs-1)
		}
		var kill time.Duration
		if rr.Kills < h.o.ReplayKills {
			kill = replayKillMin + time.Duration(h.rng.Int64N(int64(replayKillMax-replayKillMin)))
		}
		res, killed, err := h.replayProcess(ctx, "replay-"+strconv.Itoa(rr.Runs), spec, kill)
		if err != nil {
			return err
		}
		if killed {
			rr.Kills++
			continue
		}
		rr.Apply = res
		break
	}

	after, err := ledgerCounts(ctx, h.dbURL)
	if err != nil {
		return err
	}
	for id := range fixIDs {
		row := after[id]
		switch {
		case row.n == 0:
			rr.Lost++
		case row.amount != row.n*amountOf(id):
			rr.WrongAmount++
		}
	}
	for _, row := range after {
		rr.DuplicatesApplied += int(max(0, row.n-1))
	}
	rr.Unexpected = changed(before, after, fixIDs)
	dl, err = readDeadLetters(ctx, h.brokers, dlqTopic)
	if err != nil {
		return err
	}
	parked := map[position]bool{}
	for _, d := range dl.all {
		if d.reason == string(replay.ReasonParked) && d.replayID == replayApplyID {
			parked[d.pos] = true
		}
	}
	rr.ParkedInDLQ = len(parked)
	for pos := range brokenPos {
		if !parked[pos] {
			rr.Lost++
		}
	}
	return nil
}

// runReplay runs one replay process to its end.
func (h *harness) runReplay(ctx context.Context, name string, spec replay.Spec) (replay.Result, error) {
	res, _, err := h.replayProcess(ctx, name, spec, 0)
	return res, err
}

// replayProcess runs `consumer replay` with spec and the SQL group's
// configuration; with kill > 0 it kill -9s the process that long after its
// start if it is still running (killed). An exit with an incomplete result is
// an error.
func (h *harness) replayProcess(ctx context.Context, name string, spec replay.Spec, kill time.Duration) (res replay.Result, killed bool, err error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return res, false, err
	}
	file := filepath.Join(h.work, name+".result.json")
	env := append(consumerEnv(h.brokers, h.dbURL), replay.EnvSpec+"="+string(raw), replay.EnvResultFile+"="+file)
	p, err := proc.Start(name, proc.Options{LogDir: h.work, Stream: h.stream, Env: env}, filepath.Join(h.bin, "consumer"), replay.Subcommand)
	if err != nil {
		return res, false, err
	}
	defer func() {
		if !p.Exited() {
			p.Kill()
		}
	}()
	var timer <-chan time.Time
	if kill > 0 {
		t := time.NewTimer(kill)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-p.Done():
	case <-timer:
		if !p.Exited() {
			p.Kill()
			return res, true, nil
		}
	case <-ctx.Done():
		return res, false, ctx.Err()
	case <-time.After(5 * time.Minute):
		return res, false, fmt.Errorf("%s did not finish in 5 minutes:\n%s", name, p.TailLog(20))
	}
	<-p.Done()
	b, rerr := os.ReadFile(file) //nolint:gosec // G304: the harness's own work directory
	if rerr == nil {
		rerr = json.Unmarshal(b, &res)
	}
	if err := errors.Join(p.Err(), rerr); err != nil {
		return res, false, fmt.Errorf("%s: %w:\n%s", name, err, p.TailLog(20))
	}
	return res, false, nil
}

// ledgerCounts is the ledger's rows per id.
func ledgerCounts(ctx context.Context, dbURL string) (map[uuid.UUID]idRow, error) {
	rows, err := queryIDRows(ctx, dbURL, "the ledger", `SELECT event_id, count(*), sum(amount), NULL::timestamptz FROM ledger GROUP BY event_id`)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]idRow, len(rows))
	for _, r := range rows {
		out[r.id] = r
	}
	return out, nil
}

// changed counts the ids outside except whose row count differs between
// before and after.
func changed(before, after map[uuid.UUID]idRow, except map[uuid.UUID]bool) int {
	n := 0
	for id, a := range after {
		if !except[id] && a.n != before[id].n {
			n++
		}
	}
	for id := range before {
		if _, ok := after[id]; !ok && !except[id] {
			n++
		}
	}
	return n
}
