package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoEndToEnd runs the demo's whole path (control plane, PostgreSQL,
// broker, operator process, consumer processes started from the operator's
// Deployment) with a smaller workload, and fails if any invariant of the
// report breaks or anything is left behind.
func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: skipped in -short mode")
	}
	before := leftovers(t)
	o := defaultOptions()
	o.Unique = 600
	// The first step builds three binaries, slow on a busy 2-core machine.
	o.Timeout = 10 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	var progress strings.Builder
	rep, err := Run(ctx, o, &progress)
	var out strings.Builder
	if rep != nil {
		rep.Print(&out)
	}
	t.Log(progress.String())
	t.Log(out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if problems := rep.Check(); len(problems) > 0 {
		t.Fatalf("report does not reconcile:\n%s", strings.Join(problems, "\n"))
	}
	// The report's own numbers, restated: one business row per unique id,
	// every bad event dead-lettered, duplicates seen and skipped.
	if rep.LedgerRows != o.Unique || rep.LedgerTwice != 0 {
		t.Fatalf("ledger rows %d (twice %d), want %d once each", rep.LedgerRows, rep.LedgerTwice, o.Unique)
	}
	if rep.Workload.Duplicates == 0 || sum(rep.DeadLetter) < sum(rep.Workload.Malformed)+rep.Workload.OutsideWindow {
		t.Fatalf("workload lacked trouble or dead letters went missing: %+v", rep.DeadLetter)
	}
	if !strings.Contains(out.String(), "RECONCILED unique=600 rows=600") {
		t.Fatalf("report lacks the reconciled line:\n%s", out.String())
	}
	// The dead-letter round trip: every dead letter selected; the events
	// the ledger refused until its limit was raised applied, each once; the
	// never-valid and malformed ones parked; the line checked against the
	// database by the report.
	wl := rep.Workload
	selected := sum(wl.Malformed) + wl.OutsideWindow + len(wl.Rejected) + len(wl.Broken)
	want := fmt.Sprintf("REPLAYED selected=%d applied=%d parked=%d\n", selected, len(wl.Rejected), sum(wl.Malformed)+len(wl.Broken))
	if len(wl.Rejected) == 0 || len(wl.Broken) == 0 || !strings.Contains(out.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, out.String())
	}
	if r := rep.Replay; r.ByReason[handlerFailedReason] != int64(len(wl.Rejected)+len(wl.Broken)) || r.LedgerApplied != len(wl.Rejected) {
		t.Fatalf("replay: %+v", r)
	}
	// The outbox hop: of 200 orders, 20 declined (rolled back with their
	// event); the 180 committed ones published and invoiced once each by
	// the second IdempotentConsumer.
	if want := "OUTBOX committed=180 published=180 applied_once=180 applied_twice=0 published_uncommitted=0\n"; !strings.Contains(out.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, out.String())
	}
	if after := leftovers(t); len(after) > len(before) {
		t.Fatalf("demo left temporary directories behind: %v", after)
	}
}

func leftovers(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "icop-demo-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
