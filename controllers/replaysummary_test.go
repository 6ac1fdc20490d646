package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// summarizeReplays sums only Apply replays of the named consumer, counts
// the running ones, and names the one started last.
func TestSummarizeReplays(t *testing.T) {
	at := func(min int) *metav1.Time {
		tm := metav1.NewTime(time.Date(2026, 12, 5, 10, min, 0, 0, time.UTC))
		return &tm
	}
	dlr := func(name, consumer string, mode kafkav1alpha1.ReplayMode, phase kafkav1alpha1.ReplayPhase, start *metav1.Time, c kafkav1alpha1.ReplayCounts) kafkav1alpha1.DeadLetterReplay {
		d := kafkav1alpha1.DeadLetterReplay{ObjectMeta: metav1.ObjectMeta{Name: name}}
		d.Spec.ConsumerRef.Name, d.Spec.Mode = consumer, mode
		d.Status.Phase, d.Status.StartTime, d.Status.Counts = phase, start, c
		return d
	}
	items := []kafkav1alpha1.DeadLetterReplay{
		dlr("a", "billing", kafkav1alpha1.ReplayApply, kafkav1alpha1.ReplaySucceeded, at(1), kafkav1alpha1.ReplayCounts{Selected: 10, Applied: 8, Parked: 2}),
		dlr("b", "billing", kafkav1alpha1.ReplayDryRun, kafkav1alpha1.ReplayDryRunComplete, at(3), kafkav1alpha1.ReplayCounts{Selected: 99}),
		dlr("c", "billing", kafkav1alpha1.ReplayApply, kafkav1alpha1.ReplayApplying, at(2), kafkav1alpha1.ReplayCounts{Selected: 5, Applied: 1, Duplicates: 1, FailedAgain: 1}),
		dlr("d", "other", kafkav1alpha1.ReplayApply, kafkav1alpha1.ReplaySucceeded, at(9), kafkav1alpha1.ReplayCounts{Applied: 1000}),
	}
	got := summarizeReplays("billing", items)
	want := kafkav1alpha1.DeadLetterReplaysStatus{Replays: 3, Active: 1,
		Applied:    kafkav1alpha1.ReplayCounts{Selected: 15, Applied: 9, Duplicates: 1, FailedAgain: 1, Parked: 2},
		LastReplay: "b", LastPhase: kafkav1alpha1.ReplayDryRunComplete}
	if got == nil || *got != want {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	if got := summarizeReplays("nobody", items); got != nil {
		t.Fatalf("a consumer without replays has a summary: %+v", got)
	}
}
