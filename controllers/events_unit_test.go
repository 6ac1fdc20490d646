package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

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

// TestIdempotencyKeyChangedSettles: the condition IdempotencyKeyChanged is
// True from the template change until the dedup retention has passed since
// (every event sent under the previous template is then outside the dedup
// window, where a redelivery could not be deduplicated by either key), then
// False with reason IdempotencyKeySettled and one Normal Event; a later
// change makes it True again.
func TestIdempotencyKeyChangedSettles(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &IdempotentConsumerReconciler{Recorder: rec}
	obj := &kafkav1alpha1.IdempotentConsumer{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	obj.Spec.Dedup.Retention = &metav1.Duration{Duration: 48 * time.Hour}
	obj.Spec.Consumer = kafkav1alpha1.ConsumerSpec{Sink: kafkav1alpha1.SinkSpec{Type: kafkav1alpha1.SinkHTTP, HTTP: &kafkav1alpha1.HTTPSinkSpec{}}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	step := func(at time.Duration, tmpl string) *metav1.Condition {
		t.Helper()
		obj.Spec.Consumer.Sink.HTTP.IdempotencyKey = tmpl
		r.recordIdempotencyKey(ctx, &reconcileState{obj: obj, now: t0.Add(at)})
		return obj.GetCondition(kafkav1alpha1.ConditionIdempotencyKeyChanged)
	}
	drain := func(what string, want int, typ string) {
		t.Helper()
		if got := len(rec.Events); got != want {
			t.Fatalf("%s: %d events, want %d", what, got, want)
		}
		for range want {
			if ev := <-rec.Events; !strings.HasPrefix(ev, typ) {
				t.Errorf("%s: event %q, want type %s", what, ev, typ)
			}
		}
	}
	if c := step(0, ""); c != nil {
		t.Fatalf("first template: condition %+v", c)
	}
	if c := step(time.Hour, "{group}:{eventId}"); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("after the change: %+v", c)
	}
	drain("the change", 1, "Warning")
	if c := step(48*time.Hour, "{group}:{eventId}"); c.Status != metav1.ConditionTrue {
		t.Fatalf("47h after the change (retention 48h): %+v", c)
	}
	drain("within the retention", 0, "")
	c := step(49*time.Hour+time.Minute, "{group}:{eventId}")
	if c.Status != metav1.ConditionFalse || c.Reason != kafkav1alpha1.ReasonIdempotencyKeySettled {
		t.Fatalf("past the retention: %+v, want False %s", c, kafkav1alpha1.ReasonIdempotencyKeySettled)
	}
	drain("settled", 1, "Normal")
	step(50*time.Hour, "{group}:{eventId}")
	drain("settled again", 0, "")
	if c := step(51*time.Hour, ""); c.Status != metav1.ConditionTrue || c.Reason != kafkav1alpha1.ReasonIdempotencyKeyChanged {
		t.Fatalf("a second change: %+v", c)
	}
	drain("the second change", 1, "Warning")
}
