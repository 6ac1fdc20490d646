package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSetConditionReportsReasonChange: the first condition of a type, and a
// new reason for an existing one (whatever the status), count as changes; a
// repeat with the same reason, even with a new status or message, does not.
func TestSetConditionReportsReasonChange(t *testing.T) {
	var c IdempotentConsumer
	steps := []struct {
		status  metav1.ConditionStatus
		reason  string
		message string
		want    bool
	}{
		{metav1.ConditionTrue, ReasonPartitionsReady, "ok", true},
		{metav1.ConditionTrue, ReasonPartitionsReady, "ok again", false},
		{metav1.ConditionFalse, "LockNotAvailable", "busy", true},
		{metav1.ConditionFalse, "LockNotAvailable", "still busy", false},
		{metav1.ConditionFalse, "DatabaseUnreachable", "down", true},
		{metav1.ConditionTrue, ReasonPartitionsReady, "ok", true},
	}
	for i, s := range steps {
		if got := c.SetCondition(ConditionPartitionsReady, s.status, s.reason, s.message); got != s.want {
			t.Fatalf("step %d (%s %s): reasonChanged = %v, want %v", i, s.status, s.reason, got, s.want)
		}
		if cond := c.GetCondition(ConditionPartitionsReady); cond == nil || cond.Reason != s.reason || cond.Message != s.message || cond.Status != s.status {
			t.Fatalf("step %d: condition %+v, want %s %s %q", i, cond, s.status, s.reason, s.message)
		}
	}
	if got := c.SetCondition(ConditionReady, metav1.ConditionTrue, ReasonReady, "x"); !got {
		t.Fatal("the first condition of another type is not reported as a change")
	}
}
