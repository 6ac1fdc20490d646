package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/idempotency-dev/operator/hack/internal/localstack"
)

// replayName is the demo's DeadLetterReplay.
const replayName = "ledger-replay"

// ReplayReport is the dead-letter round trip: a DeadLetterReplay's dry run
// over every dead letter of the run, the ledger's limit raised (the "fix"),
// then the same object switched to Apply, its Jobs run by the local
// kubelet as processes of the consumer binary; and what the database and
// the dead-letter topic say afterwards.
type ReplayReport struct {
	DryRunSelected                                              int64
	ByReason                                                    map[string]int64 // from the dry run's status
	Phase                                                       string
	Selected, Applied, Duplicates, Skipped, FailedAgain, Parked int64

	DeadLettersBefore int // in the topic before the replay (what it selects)
	LedgerApplied     int // ledger rows of the refused-until-fixed ids, after
	LedgerTwice       int // of all ids, after: must be 0
	LedgerBroken      int // ledger rows of the never-valid ids: must be 0
	ProcessedAdded    int // processed_event rows the replay added
	ParkedInTopic     int // dead letters with reason parked, after
	Wanted            struct{ Applied, Parked, Skipped int }
}

// runReplay runs the round trip after the first report (rep) was taken:
// the consumers keep running meanwhile.
func (s *system) runReplay(ctx context.Context, ic *unstructured.Unstructured, rep *Report, dlq string) (*ReplayReport, error) {
	rr := &ReplayReport{DeadLettersBefore: sum(rep.DeadLetter)}
	wl := rep.Workload
	rr.Wanted.Applied = len(wl.Rejected)
	rr.Wanted.Parked = len(wl.Broken) + sum(wl.Malformed)
	rr.Wanted.Skipped = wl.OutsideWindow

	// The local kubelet runs the replay's Jobs (the sample's Deployment
	// runs already).
	kctx, stopKubelet := context.WithCancel(ctx)
	k := &localstack.Kubelet{
		K8s: s.k8s, Binary: filepath.Join(s.bin, "consumer"), Work: s.work, Verbose: s.verbose, Log: s.step,
		Skip: func(types.NamespacedName) bool { return true },
	}
	done := make(chan struct{})
	go func() { defer close(done); k.Run(kctx) }()
	defer func() { stopKubelet(); <-done }()

	s.step("DeadLetterReplay %s: a dry run over every dead letter (maxReplays 1: what fails again is parked at once)", replayName)
	dlr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kafka.idempotency.dev/v1alpha1", "kind": "DeadLetterReplay",
		"metadata": map[string]any{"name": replayName, "namespace": ic.GetNamespace()},
		"spec": map[string]any{
			"consumerRef": map[string]any{"name": ic.GetName()},
			"mode":        "DryRun",
			"maxReplays":  int64(1),
		},
	}}
	if err := s.k8s.Create(ctx, dlr); err != nil {
		return rr, fmt.Errorf("creating DeadLetterReplay %s: %w", replayName, err)
	}
	cur, err := s.waitForReplayPhase(ctx, dlr, "DryRunComplete")
	if err != nil {
		return rr, err
	}
	rr.DryRunSelected, _, _ = unstructured.NestedInt64(cur.Object, "status", "counts", "selected")
	by, _, _ := unstructured.NestedMap(cur.Object, "status", "byReason")
	rr.ByReason = map[string]int64{}
	for k, v := range by {
		if n, ok := v.(int64); ok {
			rr.ByReason[k] = n
		}
	}

	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return rr, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	table := pgx.Identifier{rep.Table}
	if i := strings.IndexByte(rep.Table, '.'); i > 0 {
		table = pgx.Identifier{rep.Table[:i], rep.Table[i+1:]}
	}
	var processedBefore int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table.Sanitize()).Scan(&processedBefore); err != nil {
		return rr, err
	}
	s.step("fixing the bug: the ledger's amount limit goes (%s)", fixLedgerDDL)
	if _, err := conn.Exec(ctx, fixLedgerDDL); err != nil {
		return rr, err
	}

	s.step("switching %s to Apply: the operator runs its Job, the local kubelet runs the Job's pod as a process", replayName)
	patch := []byte(`{"spec":{"mode":"Apply"}}`)
	if err := s.k8s.Patch(ctx, dlr, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return rr, fmt.Errorf("switching %s to Apply: %w", replayName, err)
	}
	if cur, err = s.waitForReplayPhase(ctx, dlr, "Succeeded"); err != nil {
		return rr, err
	}
	rr.Phase, _, _ = unstructured.NestedString(cur.Object, "status", "phase")
	get := func(name string) int64 {
		v, _, _ := unstructured.NestedInt64(cur.Object, "status", "counts", name)
		return v
	}
	rr.Selected, rr.Applied, rr.Duplicates = get("selected"), get("applied"), get("duplicates")
	rr.Skipped, rr.FailedAgain, rr.Parked = get("skipped"), get("failedAgain"), get("parked")

	// What the database and the topic hold.
	rows, err := conn.Query(ctx, `SELECT event_id, count(*) FROM ledger GROUP BY event_id`)
	if err != nil {
		return rr, err
	}
	for rows.Next() {
		var id uuid.UUID
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return rr, err
		}
		if _, ok := wl.Rejected[id]; ok {
			rr.LedgerApplied += n
		}
		if _, ok := wl.Broken[id]; ok {
			rr.LedgerBroken += n
		}
		if n > 1 {
			rr.LedgerTwice++
		}
	}
	if err := rows.Err(); err != nil {
		return rr, err
	}
	var processedAfter int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table.Sanitize()).Scan(&processedAfter); err != nil {
		return rr, err
	}
	rr.ProcessedAdded = processedAfter - processedBefore
	err = localstack.ReadPartition(ctx, s.brokers, dlq, 0, func(m kafka.Message) {
		for _, h := range m.Headers {
			if h.Key == reasonHeader && string(h.Value) == "parked" {
				rr.ParkedInTopic++
			}
		}
	})
	return rr, err
}

// waitForReplayPhase waits until the DeadLetterReplay reaches phase; Failed
// or Refused end the wait with its Ready condition.
func (s *system) waitForReplayPhase(ctx context.Context, dlr *unstructured.Unstructured, phase string) (*unstructured.Unstructured, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cur := dlr.DeepCopy()
		if err := s.k8s.Get(ctx, client.ObjectKeyFromObject(dlr), cur); err == nil {
			got, _, _ := unstructured.NestedString(cur.Object, "status", "phase")
			switch got {
			case phase:
				return cur, nil
			case "Failed", "Refused":
				return cur, fmt.Errorf("DeadLetterReplay %s: phase %s: %s", dlr.GetName(), got, conditionSummary(cur))
			}
			if time.Now().After(deadline) {
				return cur, fmt.Errorf("DeadLetterReplay %s: phase %q after 2m, want %s: %s", dlr.GetName(), got, phase, conditionSummary(cur))
			}
		}
		if s.mgr.Exited() {
			return nil, fmt.Errorf("the operator exited: %w\n%s", s.mgr.ExitErr(), s.mgr.TailLog(30))
		}
		if !localstack.Sleep(ctx, 200*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// Check returns the round trip's violated invariants: the status's counts
// against the database and the topic.
func (r *ReplayReport) Check() []string {
	var p []string
	if r.DryRunSelected != int64(r.DeadLettersBefore) || r.Selected != int64(r.DeadLettersBefore) {
		p = append(p, fmt.Sprintf("replay selected %d (dry run %d), dead letters in the topic %d", r.Selected, r.DryRunSelected, r.DeadLettersBefore))
	}
	var byReason int64
	for _, v := range r.ByReason {
		byReason += v
	}
	if byReason != r.DryRunSelected {
		p = append(p, fmt.Sprintf("dry run by reason sums to %d, selected %d", byReason, r.DryRunSelected))
	}
	if r.Applied != int64(r.LedgerApplied) || r.Applied != int64(r.ProcessedAdded) || r.LedgerApplied != r.Wanted.Applied {
		p = append(p, fmt.Sprintf("replay applied %d; ledger rows of the fixed ids %d, dedup rows added %d, fixable dead letters %d",
			r.Applied, r.LedgerApplied, r.ProcessedAdded, r.Wanted.Applied))
	}
	if r.Parked != int64(r.ParkedInTopic) || r.ParkedInTopic != r.Wanted.Parked {
		p = append(p, fmt.Sprintf("replay parked %d; parked dead letters in the topic %d, want %d", r.Parked, r.ParkedInTopic, r.Wanted.Parked))
	}
	if r.Skipped != int64(r.Wanted.Skipped) || r.Duplicates != 0 || r.FailedAgain != 0 {
		p = append(p, fmt.Sprintf("replay skipped %d (want %d), duplicates %d, failed again %d (want 0, 0)", r.Skipped, r.Wanted.Skipped, r.Duplicates, r.FailedAgain))
	}
	if r.Selected != r.Applied+r.Duplicates+r.Skipped+r.FailedAgain+r.Parked {
		p = append(p, fmt.Sprintf("replay counts do not add up: %d selected", r.Selected))
	}
	if r.LedgerTwice != 0 || r.LedgerBroken != 0 {
		p = append(p, fmt.Sprintf("after the replay: %d ids applied twice, %d never-valid ids applied", r.LedgerTwice, r.LedgerBroken))
	}
	return p
}

// Print writes the round trip for a person, ending with the REPLAYED line.
func (r *ReplayReport) Print(w io.Writer) {
	fmt.Fprintf(w, "dead-letter replay %s: dry run selected %d, by reason (status.byReason)\n", replayName, r.DryRunSelected)
	var reasons []string
	for k := range r.ByReason {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		fmt.Fprintf(w, "  %-24s %d\n", k, r.ByReason[k])
	}
	fmt.Fprintf(w, "apply (after the fix): phase %s, applied %d, duplicates %d, skipped %d (outside the window), failed again %d, parked %d\n",
		r.Phase, r.Applied, r.Duplicates, r.Skipped, r.FailedAgain, r.Parked)
	fmt.Fprintf(w, "  database: ledger rows of the fixed ids %d, dedup rows added %d, ids applied twice %d; parked in the topic %d\n",
		r.LedgerApplied, r.ProcessedAdded, r.LedgerTwice, r.ParkedInTopic)
	if problems := r.Check(); len(problems) == 0 {
		fmt.Fprintf(w, "REPLAYED selected=%d applied=%d parked=%d\n", r.Selected, r.Applied, r.Parked)
	} else {
		fmt.Fprintf(w, "NOT REPLAYED: %s\n", strings.Join(problems, "; "))
	}
}
