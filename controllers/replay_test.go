/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/replay"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// Envtest runs no kubelet and no Job controller: the tests play both,
// setting a Job's status and creating its pods with the termination
// message a replay container leaves.

func newReplay(ns, name, consumer string, mods ...func(*kafkav1alpha1.DeadLetterReplay)) *kafkav1alpha1.DeadLetterReplay {
	d := &kafkav1alpha1.DeadLetterReplay{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       kafkav1alpha1.DeadLetterReplaySpec{ConsumerRef: kafkav1alpha1.ConsumerReference{Name: consumer}},
	}
	for _, m := range mods {
		m(d)
	}
	return d
}

func (te *testEnv) getReplay(t testing.TB, ns, name string) *kafkav1alpha1.DeadLetterReplay {
	t.Helper()
	d := &kafkav1alpha1.DeadLetterReplay{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
		t.Fatalf("getting DeadLetterReplay %s/%s: %v", ns, name, err)
	}
	return d
}

func replaySummary(d *kafkav1alpha1.DeadLetterReplay) string {
	var parts []string
	for _, c := range d.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("phase %q, job %q, counts %+v, generation %d observed %d; %s",
		d.Status.Phase, d.Status.JobName, d.Status.Counts, d.Generation, d.Status.ObservedGeneration, strings.Join(parts, "; "))
}

// waitReplay waits until the replay is in phase with Ready's reason, for
// its current generation, and returns it.
func (te *testEnv) waitReplay(t testing.TB, ns, name string, phase kafkav1alpha1.ReplayPhase, readyReason string) *kafkav1alpha1.DeadLetterReplay {
	t.Helper()
	var d *kafkav1alpha1.DeadLetterReplay
	eventually(t, 30*time.Second, fmt.Sprintf("DeadLetterReplay %s/%s in phase %s (%s)", ns, name, phase, readyReason), func() (bool, string) {
		d = te.getReplay(t, ns, name)
		c := meta.FindStatusCondition(d.Status.Conditions, kafkav1alpha1.ConditionReady)
		return d.Status.Phase == phase && c != nil && c.Reason == readyReason && c.ObservedGeneration == d.Generation &&
			d.Status.ObservedGeneration == d.Generation, replaySummary(d)
	})
	return d
}

func (te *testEnv) waitJob(t testing.TB, ns, name string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	eventually(t, 30*time.Second, "Job "+ns+"/"+name, func() (bool, string) {
		err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, job)
		return err == nil, fmt.Sprint(err)
	})
	return job
}

// conditionOf returns the condition of that type, or a zero one.
func conditionOf(d *kafkav1alpha1.DeadLetterReplay, condType string) metav1.Condition {
	if c := meta.FindStatusCondition(d.Status.Conditions, condType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// replaySpecOf parses the REPLAY_SPEC variable of the Job's container.
func replaySpecOf(t testing.TB, job *batchv1.Job) replay.Spec {
	t.Helper()
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name == replay.EnvSpec {
			var s replay.Spec
			if err := json.Unmarshal([]byte(e.Value), &s); err != nil {
				t.Fatalf("REPLAY_SPEC is not a replay.Spec: %v: %s", err, e.Value)
			}
			return s
		}
	}
	t.Fatalf("Job %s has no %s", job.Name, replay.EnvSpec)
	return replay.Spec{}
}

// podExit is one pod of a Job, as the kubelet would report it.
type podExit struct {
	exitCode int32
	result   *replay.Result // the termination message; nil: none
}

// finishJob plays the Job controller and the kubelet: a terminated pod per
// exit (with the Job's pod labels, so its selector finds it), then the
// Job's terminal status, Complete or Failed.
func (te *testEnv) finishJob(t testing.TB, job *batchv1.Job, complete bool, exits ...podExit) {
	t.Helper()
	ctx := context.Background()
	start := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	for i, ex := range exits {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: job.Namespace, Name: fmt.Sprintf("%s-%d-%s", job.Name, i, randSuffix()),
				Labels: job.Spec.Template.Labels,
			},
			Spec: *job.Spec.Template.Spec.DeepCopy(),
		}
		if err := te.c.Create(ctx, pod); err != nil {
			t.Fatalf("creating pod of Job %s: %v", job.Name, err)
		}
		msg := ""
		if ex.result != nil {
			b, _ := json.Marshal(ex.result)
			msg = string(b)
		}
		phase := corev1.PodSucceeded
		if ex.exitCode != 0 {
			phase = corev1.PodFailed
		}
		finished := metav1.NewTime(start.Add(time.Duration(i+1) * time.Second))
		pod.Status = corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
			Name: objects.ConsumerContainer, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: ex.exitCode, Message: msg, StartedAt: start, FinishedAt: finished,
			}},
		}}}
		if err := te.c.Status().Update(ctx, pod); err != nil {
			t.Fatalf("setting the status of pod %s: %v", pod.Name, err)
		}
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(ty batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: ty, Status: corev1.ConditionTrue, Reason: reason, Message: "set by the test",
			LastProbeTime: now, LastTransitionTime: now}
	}
	for range 10 {
		cur := &batchv1.Job{}
		if err := te.c.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			t.Fatal(err)
		}
		cur.Status = batchv1.JobStatus{StartTime: &start}
		if complete {
			cur.Status.Succeeded = 1
			cur.Status.Failed = int32(len(exits) - 1)
			cur.Status.CompletionTime = &now
			cur.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), cond(batchv1.JobComplete, "CompletionsReached")}
		} else {
			cur.Status.Failed = int32(len(exits))
			cur.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, "BackoffLimitExceeded"), cond(batchv1.JobFailed, "BackoffLimitExceeded")}
		}
		err := te.c.Status().Update(ctx, cur)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatalf("setting the status of Job %s: %v", job.Name, err)
		}
	}
	t.Fatalf("setting the status of Job %s kept conflicting", job.Name)
}

// serviceAccount creates a ServiceAccount (envtest runs no controller that
// makes "default", and pods naming a missing one are refused).
func (te *testEnv) serviceAccount(t testing.TB, ns, name string) {
	t.Helper()
	te.create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

func (te *testEnv) updateReplay(t testing.TB, ns, name string, mutate func(*kafkav1alpha1.DeadLetterReplay)) error {
	t.Helper()
	return updateObject(te, &kafkav1alpha1.DeadLetterReplay{}, ns, name, mutate)
}

// checkReplayVerdict: kstatus (Flux, kubectl wait) and the Argo CD health
// check of docs/gitops.md read the replay's status as want.
func (te *testEnv) checkReplayVerdict(t testing.TB, ns, name string, want status.Status) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kafkav1alpha1.GroupVersion.WithKind("DeadLetterReplay"))
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatalf("kstatus.Compute: %v", err)
	}
	if res.Status != want {
		t.Errorf("%s: kstatus %s (%s), want %s", name, res.Status, res.Message, want)
	}
	if health, msg := argoHealth(t, u.Object); health != argoFor[want] {
		t.Errorf("%s: the Argo CD health check says %s (%s), want %s", name, health, msg, argoFor[want])
	}
}

func (te *testEnv) replayEvents(t testing.TB, ns, name string) []string {
	t.Helper()
	var reasons []string
	for _, e := range te.eventsOf(t, ns, "DeadLetterReplay", name) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// TestDeadLetterReplay_Lifecycle: a DeadLetterReplay makes the dry run's
// Job from the consumer Deployment's pod spec (image, environment with
// Secret references, volumes, service account, security context) with the
// replay subcommand, REPLAY_SPEC and an owner reference; the status follows
// the Job and the Result in its pod's termination message; the switch to
// Apply keeps the selection and the cutoff; after it the spec is immutable;
// a finished replay starts nothing again.
func TestDeadLetterReplay_Lifecycle(t *testing.T) {
	te := startEnv(t, envOptions{})
	ctx := context.Background()
	ns := te.namespace(t)
	te.serviceAccount(t, ns, "billing-sa")
	ic := newConsumer(ns, "billing", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Consumer.Sink = kafkav1alpha1.SinkSpec{Type: kafkav1alpha1.SinkHTTP, HTTP: &kafkav1alpha1.HTTPSinkSpec{
			URL: "https://billing.example.com/events", AuthorizationSecretRef: &kafkav1alpha1.SecretKeyRef{Name: "billing-http", Key: "authorization"},
		}}
		o.Spec.Kafka.SASL = &kafkav1alpha1.KafkaSASL{Mechanism: kafkav1alpha1.SASLScramSHA512,
			UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: "billing-kafka", Key: "username"},
			PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: "billing-kafka", Key: "password"}}
		o.Spec.Kafka.TLS = &kafkav1alpha1.KafkaTLS{CASecretRef: &kafkav1alpha1.SecretKeyRef{Name: "billing-kafka", Key: "ca.crt"}}
		o.Spec.Consumer.PodTemplate = &kafkav1alpha1.PodTemplateOverrides{ServiceAccountName: "billing-sa"}
	})
	te.create(t, ic)
	ic = te.get(t, ns, "billing")

	after := metav1.NewTime(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	before := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	id := "01936f2e-7c3a-7b4e-9d2f-0123456789ab"
	dlr := newReplay(ns, "fix-1", "billing", func(d *kafkav1alpha1.DeadLetterReplay) {
		d.Spec.Selection = kafkav1alpha1.ReplaySelection{
			Reasons:            []kafkav1alpha1.DeadLetterReason{kafkav1alpha1.DeadLetterHandlerFailed, kafkav1alpha1.DeadLetterParked},
			DeadLetteredAfter:  &after,
			DeadLetteredBefore: &before,
			Partitions:         []kafkav1alpha1.ReplayPartitionRange{{Partition: 2, FromOffset: ptr.To(int64(10)), ToOffset: ptr.To(int64(99))}},
			EventIDs:           []string{id},
			Key:                ptr.To("customer-7"),
			MaxCount:           500,
		}
		d.Spec.RatePerSecond = 50
		d.Spec.MaxReplays = 2
	})
	te.create(t, dlr)

	job := te.waitJob(t, ns, "fix-1-dryrun")
	d := te.waitReplay(t, ns, "fix-1", kafkav1alpha1.ReplayDryRunning, kafkav1alpha1.ReasonDryRunning)
	if c := conditionOf(d, kafkav1alpha1.ConditionReconciling); c.Status != metav1.ConditionTrue {
		t.Errorf("while the dry run runs, Reconciling = %+v, want True", c)
	}
	te.checkReplayVerdict(t, ns, "fix-1", status.InProgressStatus)
	if d.Spec.Mode != kafkav1alpha1.ReplayDryRun {
		t.Errorf("spec.mode defaulted to %q, want DryRun", d.Spec.Mode)
	}
	if d.Status.Cutoff == nil || d.Status.JobName != job.Name || d.Status.ReplayID != string(d.UID) {
		t.Fatalf("status after the Job's creation: %+v", d.Status)
	}

	// The Job: the Deployment's pod spec, plus the replay's.
	dep := objects.Deployment(ic, objects.Options{DefaultImage: te.r.Options.ConsumerImage})
	depPod, pod := dep.Spec.Template.Spec, job.Spec.Template.Spec
	ctr, depCtr := pod.Containers[0], depPod.Containers[0]
	if ctr.Image != te.r.Options.ConsumerImage || !slices.Equal(ctr.Args, []string{replay.Subcommand}) {
		t.Errorf("container image %q args %q, want %q [%s]", ctr.Image, ctr.Args, te.r.Options.ConsumerImage, replay.Subcommand)
	}
	var env []corev1.EnvVar
	for _, e := range ctr.Env {
		if e.Name != replay.EnvSpec {
			env = append(env, e)
		}
	}
	if !equality.Semantic.DeepEqual(env, depCtr.Env) { // Semantic: the API server spelled the divisor's zero its way
		t.Errorf("the Job's environment is not the consumer Deployment's:\n job %+v\n dep %+v", env, depCtr.Env)
	}
	secretRefs := map[string]bool{}
	for _, e := range env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secretRefs[e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key] = true
		}
	}
	for _, want := range []string{"db/url", "billing-http/authorization", "billing-kafka/username", "billing-kafka/password"} {
		if !secretRefs[want] {
			t.Errorf("the Job's environment lacks the Secret reference %s (has %v)", want, secretRefs)
		}
	}
	if !reflect.DeepEqual(pod.Volumes, depPod.Volumes) || !reflect.DeepEqual(ctr.VolumeMounts, depCtr.VolumeMounts) {
		t.Errorf("volumes differ from the Deployment's:\n job %+v %+v\n dep %+v %+v", pod.Volumes, ctr.VolumeMounts, depPod.Volumes, depCtr.VolumeMounts)
	}
	if pod.ServiceAccountName != "billing-sa" || !reflect.DeepEqual(pod.SecurityContext, depPod.SecurityContext) ||
		!reflect.DeepEqual(ctr.SecurityContext, depCtr.SecurityContext) || !ptr.Deref(ctr.SecurityContext.ReadOnlyRootFilesystem, false) {
		t.Errorf("service account %q, pod security %+v, container security %+v: want the Deployment's", pod.ServiceAccountName, pod.SecurityContext, ctr.SecurityContext)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever || ptr.Deref(job.Spec.BackoffLimit, 0) < 1 ||
		ctr.TerminationMessagePolicy != corev1.TerminationMessageReadFile || ctr.TerminationMessagePath != replay.DefaultResultFile ||
		ctr.LivenessProbe != nil || len(ctr.Ports) != 0 {
		t.Errorf("restartPolicy %q backoffLimit %v termination message %q %q probes %v ports %v", pod.RestartPolicy,
			job.Spec.BackoffLimit, ctr.TerminationMessagePolicy, ctr.TerminationMessagePath, ctr.LivenessProbe, ctr.Ports)
	}
	if sel := dep.Spec.Selector.MatchLabels; job.Spec.Template.Labels[objects.LabelInstance] == sel[objects.LabelInstance] {
		t.Errorf("the replay pods carry the consumer Deployment's selector labels %v: %v", sel, job.Spec.Template.Labels)
	}
	if !metav1.IsControlledBy(job, d) || !ptr.Deref(job.OwnerReferences[0].BlockOwnerDeletion, false) {
		t.Errorf("Job owner references %+v, want the DeadLetterReplay as controller", job.OwnerReferences)
	}
	spec := replaySpecOf(t, job)
	want := replay.Spec{
		ID: string(d.UID), Mode: replay.ModeDryRun, Cutoff: d.Status.Cutoff.UTC(), RatePerSecond: 50, MaxReplays: 2,
		Selection: replay.Selection{
			Reasons:            []event.Reason{event.ReasonHandlerFailed, replay.ReasonParked},
			DeadLetteredAfter:  ptr.To(after.UTC()),
			DeadLetteredBefore: ptr.To(before.UTC()),
			Partitions:         []replay.PartitionRange{{Partition: 2, FromOffset: ptr.To(int64(10)), ToOffset: ptr.To(int64(99))}},
			EventIDs:           []string{id},
			Key:                ptr.To("customer-7"),
			MaxCount:           500,
		},
	}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("REPLAY_SPEC:\n got  %+v\n want %+v", spec, want)
	}

	// The dry run ends: its counts come from the termination message.
	te.finishJob(t, job, true, podExit{0, &replay.Result{ID: string(d.UID), Mode: replay.ModeDryRun, Complete: true,
		Counts:   replay.Counts{Selected: 42},
		ByReason: map[event.Reason]int64{event.ReasonHandlerFailed: 40, replay.ReasonParked: 2}}})
	d = te.waitReplay(t, ns, "fix-1", kafkav1alpha1.ReplayDryRunComplete, kafkav1alpha1.ReasonDryRunComplete)
	if d.Status.Counts.Selected != 42 || d.Status.ByReason["handler_failed"] != 40 || d.Status.ByReason["parked"] != 2 ||
		conditionOf(d, kafkav1alpha1.ConditionReady).Status != metav1.ConditionTrue ||
		meta.FindStatusCondition(d.Status.Conditions, kafkav1alpha1.ConditionReconciling) != nil || d.Status.CompletionTime == nil {
		t.Errorf("after the dry run: %s; byReason %v", replaySummary(d), d.Status.ByReason)
	}
	te.checkReplayVerdict(t, ns, "fix-1", status.CurrentStatus)
	cutoff := d.Status.Cutoff.DeepCopy()

	// Apply with another selection: refused. With the same: accepted.
	err := te.updateReplay(t, ns, "fix-1", func(d *kafkav1alpha1.DeadLetterReplay) {
		d.Spec.Mode = kafkav1alpha1.ReplayApply
		d.Spec.Selection.MaxCount = 10
	})
	if err == nil || !strings.Contains(err.Error(), "selection is immutable") {
		t.Fatalf("DryRun -> Apply with a changed selection: err = %v, want the selection rule's refusal", err)
	}
	if err := te.updateReplay(t, ns, "fix-1", func(d *kafkav1alpha1.DeadLetterReplay) { d.Spec.Mode = kafkav1alpha1.ReplayApply }); err != nil {
		t.Fatalf("DryRun -> Apply with the same selection: %v", err)
	}
	applyJob := te.waitJob(t, ns, "fix-1-apply")
	d = te.waitReplay(t, ns, "fix-1", kafkav1alpha1.ReplayApplying, kafkav1alpha1.ReasonApplying)
	as := replaySpecOf(t, applyJob)
	if as.Mode != replay.ModeApply || as.ID != string(d.UID) || !as.Cutoff.Equal(cutoff.Time) || !reflect.DeepEqual(as.Selection, want.Selection) {
		t.Errorf("the apply's REPLAY_SPEC %+v: want mode Apply, the same ID, cutoff %s and selection", as, cutoff)
	}
	if !d.Status.Cutoff.Equal(cutoff) || d.Status.Counts != (kafkav1alpha1.ReplayCounts{}) || d.Status.ByReason["handler_failed"] != 40 {
		t.Errorf("once the apply started: cutoff %v (was %v), counts %+v (want reset), byReason %v (want the dry run's)", d.Status.Cutoff, cutoff, d.Status.Counts, d.Status.ByReason)
	}

	// After Apply nothing in the spec changes, not even the rate or back.
	for what, mutate := range map[string]func(*kafkav1alpha1.DeadLetterReplay){
		"ratePerSecond": func(d *kafkav1alpha1.DeadLetterReplay) { d.Spec.RatePerSecond = 1 },
		"mode DryRun":   func(d *kafkav1alpha1.DeadLetterReplay) { d.Spec.Mode = kafkav1alpha1.ReplayDryRun },
		"consumerRef":   func(d *kafkav1alpha1.DeadLetterReplay) { d.Spec.ConsumerRef.Name = "ledger" },
	} {
		if err := te.updateReplay(t, ns, "fix-1", mutate); err == nil || !apierrors.IsInvalid(err) {
			t.Errorf("changing %s after Apply: err = %v, want Invalid", what, err)
		} else if what == "ratePerSecond" && !strings.Contains(err.Error(), "immutable once mode is Apply") {
			t.Errorf("changing %s after Apply: %v, want the message naming the rule", what, err)
		}
	}

	// A pod killed, its replacement finishes: the counts are the last pod's
	// (the whole run's, durable), from the pod that succeeded.
	te.finishJob(t, applyJob, true,
		podExit{137, nil},
		podExit{0, &replay.Result{ID: string(d.UID), Mode: replay.ModeApply, Complete: true,
			Counts: replay.Counts{Selected: 42, Applied: 35, Duplicates: 3, Skipped: 1, FailedAgain: 2, Parked: 1}}})
	d = te.waitReplay(t, ns, "fix-1", kafkav1alpha1.ReplaySucceeded, kafkav1alpha1.ReasonReplaySucceeded)
	wantCounts := kafkav1alpha1.ReplayCounts{Selected: 42, Applied: 35, Duplicates: 3, Skipped: 1, FailedAgain: 2, Parked: 1}
	if d.Status.Counts != wantCounts || conditionOf(d, kafkav1alpha1.ConditionReady).Status != metav1.ConditionTrue ||
		meta.FindStatusCondition(d.Status.Conditions, kafkav1alpha1.ConditionStalled) != nil {
		t.Errorf("after the apply: %s, want counts %+v", replaySummary(d), wantCounts)
	}
	te.checkReplayVerdict(t, ns, "fix-1", status.CurrentStatus)
	// The consumer's status sums its replays (what was replayed and parked:
	// the dead-letter topic itself never shrinks).
	eventually(t, 30*time.Second, "status.deadLetterReplays of the consumer", func() (bool, string) {
		got := te.get(t, ns, "billing").Status.DeadLetterReplays
		want := kafkav1alpha1.DeadLetterReplaysStatus{Replays: 1, Applied: wantCounts, LastReplay: "fix-1", LastPhase: kafkav1alpha1.ReplaySucceeded}
		return got != nil && *got == want, fmt.Sprintf("%+v, want %+v", got, want)
	})
	evs := te.replayEvents(t, ns, "fix-1")
	for _, r := range []string{ReasonReplayJobCreated, kafkav1alpha1.ReasonDryRunComplete, kafkav1alpha1.ReasonReplaySucceeded} {
		if !slices.Contains(evs, r) {
			t.Errorf("no Event %s (have %v)", r, evs)
		}
	}

	// Re-applying a finished object (an annotation change, its Job gone)
	// starts nothing.
	if err := te.c.Delete(ctx, applyJob, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	if err := te.updateReplay(t, ns, "fix-1", func(d *kafkav1alpha1.DeadLetterReplay) {
		d.Annotations = map[string]string{"test.idempotency.dev/poke": randSuffix()}
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := te.c.Get(ctx, client.ObjectKeyFromObject(applyJob), &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("a finished replay's deleted Job came back (err %v)", err)
	}
	if d := te.getReplay(t, ns, "fix-1"); d.Status.Phase != kafkav1alpha1.ReplaySucceeded || d.Status.Counts != wantCounts {
		t.Errorf("a finished replay changed: %s", replaySummary(d))
	}
}

// TestDeadLetterReplay_Refusals: no Job, and a Stalled condition with a
// reason of its own and a Warning Event, for a missing IdempotentConsumer
// (lifted when it is created), a table-only one, and a custom image without
// the opt-in (lifted by the annotation); a failed Job is Failed and Stalled.
func TestDeadLetterReplay_Refusals(t *testing.T) {
	te := startEnv(t, envOptions{})
	ctx := context.Background()
	ns := te.namespace(t)
	te.serviceAccount(t, ns, "default")

	stalled := func(name, reason, mention string) {
		t.Helper()
		d := te.waitReplay(t, ns, name, kafkav1alpha1.ReplayRefused, reason)
		c := conditionOf(d, kafkav1alpha1.ConditionStalled)
		if c.Status != metav1.ConditionTrue || c.Reason != reason || !strings.Contains(c.Message, mention) {
			t.Errorf("%s: Stalled = %+v, want True/%s mentioning %q", name, c, reason, mention)
		}
		te.checkReplayVerdict(t, ns, name, status.FailedStatus)
		var jobs batchv1.JobList
		if err := te.c.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{objects.LabelReplay: name}); err != nil {
			t.Fatal(err)
		}
		if len(jobs.Items) != 0 {
			t.Errorf("%s: refused, yet Jobs %v exist", name, jobs.Items)
		}
		eventually(t, 10*time.Second, "Warning Event "+reason, func() (bool, string) {
			evs := te.replayEvents(t, ns, name)
			return slices.Contains(evs, reason), fmt.Sprint(evs)
		})
	}

	// Missing, then created.
	te.create(t, newReplay(ns, "missing", "payments"))
	stalled("missing", kafkav1alpha1.ReasonConsumerNotFound, `"payments" does not exist`)
	te.create(t, newConsumer(ns, "payments"))
	te.waitJob(t, ns, "missing-dryrun")
	d := te.waitReplay(t, ns, "missing", kafkav1alpha1.ReplayDryRunning, kafkav1alpha1.ReasonDryRunning)
	if meta.FindStatusCondition(d.Status.Conditions, kafkav1alpha1.ConditionStalled) != nil {
		t.Errorf("Stalled stayed after the consumer appeared: %s", replaySummary(d))
	}

	// Table only.
	te.create(t, newConsumer(ns, "orders", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer = kafkav1alpha1.ConsumerSpec{} }))
	te.create(t, newReplay(ns, "tableonly", "orders"))
	stalled("tableonly", kafkav1alpha1.ReasonConsumerTableOnly, "table only")

	// A custom image: refused until the IdempotentConsumer says it replays.
	const custom = "registry.example.com/team/billing-consumer:1.4.2"
	te.create(t, newConsumer(ns, "custom", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.Image = custom }))
	te.create(t, newReplay(ns, "custom", "custom", func(d *kafkav1alpha1.DeadLetterReplay) { d.Spec.Mode = kafkav1alpha1.ReplayApply }))
	stalled("custom", kafkav1alpha1.ReasonImageCannotReplay, kafkav1alpha1.AnnotationReplayCapable)
	if err := te.update(t, ns, "custom", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Annotations = map[string]string{kafkav1alpha1.AnnotationReplayCapable: "true"}
	}); err != nil {
		t.Fatal(err)
	}
	job := te.waitJob(t, ns, "custom-apply")
	if img := job.Spec.Template.Spec.Containers[0].Image; img != custom {
		t.Errorf("the opted-in replay runs image %q, want %q", img, custom)
	}

	// The Job fails (retries used up): Failed, Stalled, with the replay's
	// own error and partial counts.
	d = te.waitReplay(t, ns, "custom", kafkav1alpha1.ReplayApplying, kafkav1alpha1.ReasonApplying)
	te.finishJob(t, job, false, podExit{1, &replay.Result{ID: string(d.UID), Mode: replay.ModeApply,
		Counts: replay.Counts{Selected: 9, Applied: 4}, Error: "sink: connection refused"}})
	d = te.waitReplay(t, ns, "custom", kafkav1alpha1.ReplayFailed, kafkav1alpha1.ReasonJobFailed)
	if c := conditionOf(d, kafkav1alpha1.ConditionStalled); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "sink: connection refused") ||
		d.Status.Counts.Applied != 4 {
		t.Errorf("after the Job failed: %s", replaySummary(d))
	}
	te.checkReplayVerdict(t, ns, "custom", status.FailedStatus)
}
