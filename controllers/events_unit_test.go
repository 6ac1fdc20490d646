package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// TestWarningEventOnEachNewReason: a condition that was True and turns
// False, or moves to another failure reason, gives one Warning Event; the
// same reason again (a retry) gives none. This held only for conditions
// seen for the first time while the previous reason was read through a
// pointer that SetCondition had already updated.
func TestWarningEventOnEachNewReason(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &IdempotentConsumerReconciler{Recorder: rec}
	obj := &kafkav1alpha1.IdempotentConsumer{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	obj.SetCondition(kafkav1alpha1.ConditionPartitionsReady, metav1.ConditionTrue, kafkav1alpha1.ReasonPartitionsReady, "ok")
	obj.SetCondition(kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionTrue, kafkav1alpha1.ReasonScaledObjectApplied, "ok")
	s := &reconcileState{obj: obj}
	ctx := context.Background()

	expect := func(what string, want int) {
		t.Helper()
		if got := len(rec.Events); got != want {
			t.Fatalf("%s: %d events, want %d", what, got, want)
		}
		for range want {
			<-rec.Events
		}
	}
	r.notReady(ctx, s, kafkav1alpha1.ConditionPartitionsReady, "Maintain", "Partitions not ready", "LockNotAvailable", "busy", true)
	expect("PartitionsReady True -> False", 1)
	r.notReady(ctx, s, kafkav1alpha1.ConditionPartitionsReady, "Maintain", "Partitions not ready", "LockNotAvailable", "still busy", true)
	expect("the same reason again", 0)
	r.notReady(ctx, s, kafkav1alpha1.ConditionPartitionsReady, "Maintain", "Partitions not ready", "DatabaseUnreachable", "down", true)
	expect("another reason", 1)

	r.autoscalingNotReady(ctx, s, "ScaledObjectNotReady", "keda says no")
	expect("AutoscalingReady True -> False", 1)
	r.autoscalingNotReady(ctx, s, "ScaledObjectNotReady", "keda still says no")
	expect("the same autoscaling reason again", 0)
}
