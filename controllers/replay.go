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
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/replay"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// The DeadLetterReplay controller: one Job per mode of a DeadLetterReplay
// (the dry run's, then, after the switch to Apply, the apply's), built from
// the IdempotentConsumer's Deployment pod spec (objects.ReplayJob); the
// status follows the Job and the replay.Result its pod leaves in its
// termination message. It keeps no database connection and no memory of
// its own: the Job, its pods and the object's status are the state.

// ReplayControllerName names the DeadLetterReplay controller.
const ReplayControllerName = "deadletterreplay"

// consumerRefIndex indexes DeadLetterReplays by spec.consumerRef.name.
const consumerRefIndex = "spec.consumerRef.name"

// Reasons of the replay's Events that are not a condition's reason.
const (
	// ReasonReplayJobCreated: a dry run's or an apply's Job was created.
	ReasonReplayJobCreated = "JobCreated"
)

const actionRunReplay = "RunReplay"

// DeadLetterReplayReconciler reconciles DeadLetterReplay objects.
type DeadLetterReplayReconciler struct {
	// Client reads from the manager's cache (DeadLetterReplays,
	// IdempotentConsumers, the operator's Jobs) and writes to the API server.
	Client client.Client
	// APIReader lists a Job's pods (pods are not cached) and looks for Jobs
	// the cache does not hold.
	APIReader client.Reader
	// Recorder emits Kubernetes Events; nil disables them.
	Recorder events.EventRecorder
	// Clock sets status.cutoff and the start times.
	Clock clock.PassiveClock
	// ConsumerImage is the operator's default consumer image, which can
	// always run a replay.
	ConsumerImage string
}

// +kubebuilder:rbac:groups=kafka.idempotency.dev,resources=deadletterreplays,verbs=get;list;watch
// +kubebuilder:rbac:groups=kafka.idempotency.dev,resources=deadletterreplays/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list

// SetupWithManager registers the reconciler, its index and its watches.
func (r *DeadLetterReplayReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.ConsumerImage == "" {
		r.ConsumerImage = objects.DefaultConsumerImage
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &kafkav1alpha1.DeadLetterReplay{}, consumerRefIndex,
		func(o client.Object) []string {
			return []string{o.(*kafkav1alpha1.DeadLetterReplay).Spec.ConsumerRef.Name}
		}); err != nil {
		return fmt.Errorf("indexing DeadLetterReplays by consumer: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ReplayControllerName).
		For(&kafkav1alpha1.DeadLetterReplay{}, builder.WithPredicates(specOrDeletionChanged())).
		Owns(&batchv1.Job{}).
		// A refusal (no consumer, table only, custom image without the
		// opt-in) is lifted by a change of the IdempotentConsumer.
		Watches(&kafkav1alpha1.IdempotentConsumer{}, handler.EnqueueRequestsFromMapFunc(r.replaysOfConsumer)).
		Complete(r)
}

// replaysOfConsumer maps an IdempotentConsumer to the replays naming it.
func (r *DeadLetterReplayReconciler) replaysOfConsumer(ctx context.Context, o client.Object) []ctrl.Request {
	var list kafkav1alpha1.DeadLetterReplayList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{consumerRefIndex: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Listing the DeadLetterReplays of an IdempotentConsumer", "idempotentConsumer", klog.KObj(o))
		return nil
	}
	var reqs []ctrl.Request
	for _, d := range list.Items {
		if d.Status.Phase == kafkav1alpha1.ReplayRefused || d.Status.Phase == "" || d.Status.Phase == kafkav1alpha1.ReplayPending {
			reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: d.Name}})
		}
	}
	return reqs
}

// replayState is what one Reconcile observed.
type replayState struct {
	obj *kafkav1alpha1.DeadLetterReplay
	// orig is obj as last read or written, for the status patch.
	orig *kafkav1alpha1.DeadLetterReplay
	mode kafkav1alpha1.ReplayMode
	now  time.Time
	// ready, progressing, stalled: at most one is set; it becomes the
	// conditions.
	ready, progressing, stalled *problem
}

// Reconcile makes sure the Job of the object's current mode exists (unless
// refused, or it already finished) and reports it in the status.
func (r *DeadLetterReplayReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &kafkav1alpha1.DeadLetterReplay{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the garbage collector deletes the Jobs and their pods
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("deadLetterReplay", klog.KObj(obj)))
	s := &replayState{obj: obj, orig: obj.DeepCopy(), mode: cmp.Or(obj.Spec.Mode, kafkav1alpha1.ReplayDryRun), now: r.Clock.Now()}
	obj.Status.ReplayID = string(obj.UID)

	if err := r.reconcileJob(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	r.summarizeReplay(s)
	return ctrl.Result{}, r.patchReplayStatus(ctx, s.orig, obj)
}

// reconcileJob finds or creates the Job of the current mode and follows it.
func (r *DeadLetterReplayReconciler) reconcileJob(ctx context.Context, s *replayState) error {
	obj := s.obj
	name := objects.ReplayJobName(obj, s.mode)
	job := &batchv1.Job{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: name}, job)
	switch {
	case apierrors.IsNotFound(err):
		if obj.Status.JobName == name && finishedPhase(obj.Status.Phase) {
			// Finished, and its Job deleted since (by hand, or a TTL):
			// nothing runs again. Replaying again means a new object.
			r.finishedState(s)
			return nil
		}
		return r.startJob(ctx, s, name)
	case err != nil:
		return fmt.Errorf("reading Job %s: %w", name, err)
	case !metav1.IsControlledBy(job, obj):
		r.refuse(ctx, s, kafkav1alpha1.ReasonJobConflict, fmt.Sprintf("Job %q exists and is not controlled by this DeadLetterReplay; delete it or choose another name", name))
		return nil
	}
	return r.followJob(ctx, s, job)
}

// finishedPhase: the Job of the status's jobName reached an end.
func finishedPhase(p kafkav1alpha1.ReplayPhase) bool {
	return p == kafkav1alpha1.ReplayDryRunComplete || p == kafkav1alpha1.ReplaySucceeded || p == kafkav1alpha1.ReplayFailed
}

// finishedState keeps the status of a finished Job as it is.
func (r *DeadLetterReplayReconciler) finishedState(s *replayState) {
	switch s.obj.Status.Phase {
	case kafkav1alpha1.ReplayFailed:
		c := s.obj.GetCondition(kafkav1alpha1.ConditionReady)
		reason, msg := kafkav1alpha1.ReasonJobFailed, "The replay's Job failed"
		if c != nil {
			reason, msg = c.Reason, c.Message
		}
		s.stalled = &problem{reason, msg}
	default:
		c := s.obj.GetCondition(kafkav1alpha1.ConditionReady)
		reason, msg := kafkav1alpha1.ReasonReplaySucceeded, "The replay finished"
		if c != nil {
			reason, msg = c.Reason, c.Message
		}
		s.ready = &problem{reason, msg}
	}
}

// startJob checks that the consumer can run the replay, fixes the cutoff on
// the first Job, and creates the Job.
func (r *DeadLetterReplayReconciler) startJob(ctx context.Context, s *replayState, name string) error {
	obj := s.obj
	ic := &kafkav1alpha1.IdempotentConsumer{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: obj.Spec.ConsumerRef.Name}, ic)
	switch {
	case apierrors.IsNotFound(err):
		r.refuse(ctx, s, kafkav1alpha1.ReasonConsumerNotFound, fmt.Sprintf(
			"IdempotentConsumer %q does not exist in namespace %s; the replay starts when it is created", obj.Spec.ConsumerRef.Name, obj.Namespace))
		return nil
	case err != nil:
		return fmt.Errorf("reading IdempotentConsumer %s: %w", obj.Spec.ConsumerRef.Name, err)
	case !ic.DeletionTimestamp.IsZero():
		r.refuse(ctx, s, kafkav1alpha1.ReasonConsumerNotFound, fmt.Sprintf("IdempotentConsumer %q is being deleted", ic.Name))
		return nil
	case !ic.HasConsumer():
		r.refuse(ctx, s, kafkav1alpha1.ReasonConsumerTableOnly, fmt.Sprintf(
			"IdempotentConsumer %q is table only (no spec.consumer): the operator runs no consumer for it, so it has no image or sink to replay with; replay with the application's own consumer (the runtime library's replay entry point)", ic.Name))
		return nil
	case !canReplay(ic, r.ConsumerImage):
		r.refuse(ctx, s, kafkav1alpha1.ReasonImageCannotReplay, fmt.Sprintf(
			"IdempotentConsumer %q runs the custom image %q, which the operator cannot tell runs the %q subcommand of the runtime library; if it does, annotate the IdempotentConsumer %s=true (docs/operator.md, DeadLetterReplay)",
			ic.Name, ic.Spec.Consumer.Image, replay.Subcommand, kafkav1alpha1.AnnotationReplayCapable))
		return nil
	}

	if obj.Status.Cutoff == nil {
		// Fixed before the first Job exists and never changed: the dry
		// run and the apply select the same dead letters.
		obj.Status.Cutoff = &metav1.Time{Time: replayCutoff(s.now)}
		if err := r.patchReplayStatus(ctx, s.orig, obj); err != nil {
			return err
		}
		s.orig = obj.DeepCopy() // the patch refreshed obj: the final write diffs from it
	}
	job, err := replayJob(obj, ic, s.mode, r.ConsumerImage)
	if err != nil {
		return fmt.Errorf("building Job %s: %w", name, err)
	}
	if err := r.Client.Create(ctx, job, client.FieldOwner(FieldOwner)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Not in the cache yet, or someone else's: the next event tells.
			other := &metav1.PartialObjectMetadata{}
			other.SetGroupVersionKind(batchv1.SchemeGroupVersion.WithKind("Job"))
			if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), other); gerr == nil && !metav1.IsControlledBy(other, obj) {
				r.refuse(ctx, s, kafkav1alpha1.ReasonJobConflict, fmt.Sprintf("Job %q exists and is not controlled by this DeadLetterReplay; delete it", name))
				return nil
			}
			s.progressing = &problem{runningReason(s.mode), fmt.Sprintf("Job %s was created", name)}
			return nil
		}
		return fmt.Errorf("creating Job %s: %w", name, err)
	}
	obj.Status.JobName = name
	obj.Status.StartTime = &metav1.Time{Time: s.now}
	obj.Status.CompletionTime = nil
	obj.Status.Phase = runningPhase(s.mode)
	if s.mode == kafkav1alpha1.ReplayApply {
		obj.Status.Counts = kafkav1alpha1.ReplayCounts{} // the apply's from now on; byReason stays the dry run's
	}
	msg := fmt.Sprintf("Created Job %s: %s of the dead letters of IdempotentConsumer %s (cutoff %s)", name, s.mode, ic.Name, obj.Status.Cutoff.UTC().Format(time.RFC3339))
	r.event(obj, corev1.EventTypeNormal, ReasonReplayJobCreated, msg)
	log.FromContext(ctx).Info("Created the replay Job", "job", name, "mode", s.mode)
	s.progressing = &problem{runningReason(s.mode), fmt.Sprintf("Job %s runs the %s", name, modeNoun(s.mode))}
	return nil
}

// replayJob is objects.ReplayJob with the contract of consumer/replay: the
// subcommand, REPLAY_SPEC and the result file.
func replayJob(dlr *kafkav1alpha1.DeadLetterReplay, ic *kafkav1alpha1.IdempotentConsumer, mode kafkav1alpha1.ReplayMode, defaultImage string) (*batchv1.Job, error) {
	spec, err := json.Marshal(replaySpec(dlr, mode))
	if err != nil {
		return nil, err
	}
	return objects.ReplayJob(dlr, ic, mode, defaultImage, objects.ReplayContainer{
		Args:       []string{replay.Subcommand},
		Env:        []corev1.EnvVar{{Name: replay.EnvSpec, Value: string(spec)}},
		ResultFile: replay.DefaultResultFile,
	}), nil
}

// replaySpec is the contract the Job's container reads from REPLAY_SPEC:
// the DeadLetterReplay's UID as its ID, its mode and selection, and the
// cutoff in its status.
func replaySpec(dlr *kafkav1alpha1.DeadLetterReplay, mode kafkav1alpha1.ReplayMode) replay.Spec {
	sel := dlr.Spec.Selection
	out := replay.Spec{
		ID:                  string(dlr.UID),
		Mode:                replay.Mode(mode),
		RatePerSecond:       float64(dlr.Spec.RatePerSecond),
		MaxReplays:          int(dlr.Spec.MaxReplays),
		ReplayOutsideWindow: dlr.Spec.ReplayOutsideWindow,
		Selection: replay.Selection{
			EventIDs: sel.EventIDs,
			Key:      sel.Key,
			MaxCount: sel.MaxCount,
		},
	}
	if c := dlr.Status.Cutoff; c != nil {
		out.Cutoff = c.UTC()
	}
	for _, r := range sel.Reasons {
		out.Selection.Reasons = append(out.Selection.Reasons, event.Reason(r))
	}
	toTime := func(t *metav1.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	out.Selection.DeadLetteredAfter = toTime(sel.DeadLetteredAfter)
	out.Selection.DeadLetteredBefore = toTime(sel.DeadLetteredBefore)
	for _, p := range sel.Partitions {
		out.Selection.Partitions = append(out.Selection.Partitions, replay.PartitionRange{
			Partition: int(p.Partition), FromOffset: p.FromOffset, ToOffset: p.ToOffset,
		})
	}
	return out
}

// canReplay: the consumer's image runs the replay subcommand. The image the
// operator defaults to (released with it) does; any other image, even
// another release of the ready-made consumer, only with the opt-in
// annotation.
func canReplay(ic *kafkav1alpha1.IdempotentConsumer, defaultImage string) bool {
	img := ic.Spec.Consumer.Image
	return img == "" || img == defaultImage || ic.Annotations[kafkav1alpha1.AnnotationReplayCapable] == "true"
}

// followJob reports a Job: running, or finished with the Result of its pod.
func (r *DeadLetterReplayReconciler) followJob(ctx context.Context, s *replayState, job *batchv1.Job) error {
	obj := s.obj
	if obj.Status.JobName != job.Name {
		// Created by a reconcile whose status write did not happen.
		obj.Status.JobName = job.Name
		obj.Status.StartTime = job.CreationTimestamp.DeepCopy()
		obj.Status.CompletionTime = nil
		obj.Status.Phase = runningPhase(s.mode)
		if s.mode == kafkav1alpha1.ReplayApply {
			obj.Status.Counts = kafkav1alpha1.ReplayCounts{}
		}
	}
	done, failed, cond := jobFinished(job)
	if !done {
		obj.Status.Phase = runningPhase(s.mode)
		msg := fmt.Sprintf("Job %s runs the %s", job.Name, modeNoun(s.mode))
		if job.Status.Failed > 0 {
			msg += fmt.Sprintf(" (%d pod(s) failed so far; each replacement resumes where the last stopped)", job.Status.Failed)
		}
		s.progressing = &problem{runningReason(s.mode), msg}
		return nil
	}
	if finishedPhase(obj.Status.Phase) && obj.Status.CompletionTime != nil {
		r.finishedState(s) // reported already; the pods are not read again
		return nil
	}
	obj.Status.CompletionTime = job.Status.CompletionTime
	if obj.Status.CompletionTime == nil && cond != nil {
		obj.Status.CompletionTime = &cond.LastTransitionTime
	}
	if obj.Status.CompletionTime == nil {
		obj.Status.CompletionTime = &metav1.Time{Time: s.now}
	}

	res, err := r.readResult(ctx, job, string(obj.UID), !failed)
	if err != nil {
		return err
	}
	if res != nil {
		obj.Status.Counts = kafkav1alpha1.ReplayCounts{
			Selected: res.Selected, Applied: res.Applied, Duplicates: res.Duplicates,
			Skipped: res.Skipped, FailedAgain: res.FailedAgain, Parked: res.Parked,
		}
		if s.mode == kafkav1alpha1.ReplayDryRun && len(res.ByReason) > 0 {
			obj.Status.ByReason = map[string]int64{}
			for k, v := range res.ByReason {
				obj.Status.ByReason[string(k)] = v
			}
		}
	}
	switch {
	case failed:
		msg := fmt.Sprintf("Job %s failed", job.Name)
		if cond != nil && cond.Message != "" {
			msg += ": " + cond.Reason + ": " + cond.Message
		}
		if res != nil && res.Error != "" {
			msg += "; the replay reported: " + res.Error
		}
		r.fail(ctx, s, kafkav1alpha1.ReasonJobFailed, msg)
	case res == nil:
		r.fail(ctx, s, kafkav1alpha1.ReasonResultMissing, fmt.Sprintf(
			"Job %s succeeded but none of its pods left a replay result in its termination message (container %q, %s); the counts are unknown",
			job.Name, objects.ConsumerContainer, replay.DefaultResultFile))
	case !res.Complete || res.Error != "":
		r.fail(ctx, s, kafkav1alpha1.ReasonReplayIncomplete, fmt.Sprintf(
			"Job %s ended without processing the whole selection: %s", job.Name, cmp.Or(res.Error, "no error reported")))
	case s.mode == kafkav1alpha1.ReplayDryRun:
		obj.Status.Phase = kafkav1alpha1.ReplayDryRunComplete
		msg := fmt.Sprintf("The dry run selected %d dead letter(s)%s; review status.byReason, then set spec.mode to Apply to replay exactly this selection",
			res.Selected, byReasonText(obj.Status.ByReason))
		s.ready = &problem{kafkav1alpha1.ReasonDryRunComplete, msg}
		r.event(obj, corev1.EventTypeNormal, kafkav1alpha1.ReasonDryRunComplete, msg)
	default:
		obj.Status.Phase = kafkav1alpha1.ReplaySucceeded
		c := obj.Status.Counts
		msg := fmt.Sprintf("Replayed %d selected dead letter(s): %d applied, %d duplicate(s), %d skipped, %d failed again, %d parked",
			c.Selected, c.Applied, c.Duplicates, c.Skipped, c.FailedAgain, c.Parked)
		s.ready = &problem{kafkav1alpha1.ReasonReplaySucceeded, msg}
		r.event(obj, corev1.EventTypeNormal, kafkav1alpha1.ReasonReplaySucceeded, msg)
	}
	return nil
}

// jobFinished reports whether the Job finished, whether it failed, and the
// condition that says so.
func jobFinished(job *batchv1.Job) (done, failed bool, cond *batchv1.JobCondition) {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, false, c
		case batchv1.JobFailed:
			return true, true, c
		}
	}
	return false, false, nil
}

// readResult reads the replay.Result a pod of the Job wrote to its
// termination message: of a pod that succeeded when the Job did, else of
// the pod that ended last. Results of another replay ID are ignored.
func (r *DeadLetterReplayReconciler) readResult(ctx context.Context, job *batchv1.Job, id string, succeeded bool) (*replay.Result, error) {
	if job.Spec.Selector == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return nil, nil
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing the pods of Job %s: %w", job.Name, err)
	}
	type found struct {
		res  replay.Result
		ok   bool
		when time.Time
	}
	var all []found
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			t := cs.State.Terminated
			if cs.Name != objects.ConsumerContainer || t == nil || t.Message == "" {
				continue
			}
			var res replay.Result
			if err := json.Unmarshal([]byte(t.Message), &res); err != nil || res.ID != id {
				log.FromContext(ctx).Info("A replay pod's termination message is not its result", "pod", klog.KObj(&p))
				continue
			}
			all = append(all, found{res, t.ExitCode == 0, t.FinishedAt.Time})
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	slices.SortFunc(all, func(a, b found) int {
		if succeeded && a.ok != b.ok { // a pod that succeeded first
			if a.ok {
				return -1
			}
			return 1
		}
		return b.when.Compare(a.when) // then the latest
	})
	return &all[0].res, nil
}

// refuse records why no Job runs: Stalled, Phase Refused, one Warning Event
// per change of reason. A change of the IdempotentConsumer reconciles again.
func (r *DeadLetterReplayReconciler) refuse(ctx context.Context, s *replayState, reason, msg string) {
	s.obj.Status.Phase = kafkav1alpha1.ReplayRefused
	s.stalled = &problem{reason, msg}
	if c := s.obj.GetCondition(kafkav1alpha1.ConditionReady); c == nil || c.Reason != reason {
		r.event(s.obj, corev1.EventTypeWarning, reason, msg)
		log.FromContext(ctx).Info("Replay refused", "reason", reason, "message", msg)
	}
}

// fail records a failed Job: Stalled, Phase Failed, a Warning Event.
func (r *DeadLetterReplayReconciler) fail(ctx context.Context, s *replayState, reason, msg string) {
	s.obj.Status.Phase = kafkav1alpha1.ReplayFailed
	s.stalled = &problem{reason, msg}
	r.event(s.obj, corev1.EventTypeWarning, reason, msg)
	log.FromContext(ctx).Info("Replay failed", "reason", reason, "message", msg)
}

// summarizeReplay sets Ready, Reconciling and Stalled as kstatus reads them.
func (r *DeadLetterReplayReconciler) summarizeReplay(s *replayState) {
	obj := s.obj
	remove := func(t string) { meta.RemoveStatusCondition(&obj.Status.Conditions, t) }
	switch {
	case s.stalled != nil:
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, s.stalled.reason, s.stalled.message)
		obj.SetCondition(kafkav1alpha1.ConditionStalled, metav1.ConditionTrue, s.stalled.reason, s.stalled.message)
		remove(kafkav1alpha1.ConditionReconciling)
	case s.ready != nil:
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionTrue, s.ready.reason, s.ready.message)
		remove(kafkav1alpha1.ConditionReconciling)
		remove(kafkav1alpha1.ConditionStalled)
	default:
		p := s.progressing
		if p == nil {
			p = &problem{kafkav1alpha1.ReasonReplayPending, "Waiting for the replay's Job"}
			obj.Status.Phase = cmp.Or(obj.Status.Phase, kafkav1alpha1.ReplayPending)
		}
		obj.SetCondition(kafkav1alpha1.ConditionReady, metav1.ConditionFalse, p.reason, p.message)
		obj.SetCondition(kafkav1alpha1.ConditionReconciling, metav1.ConditionTrue, p.reason, p.message)
		remove(kafkav1alpha1.ConditionStalled)
	}
	obj.Status.ObservedGeneration = obj.Generation
}

// patchReplayStatus writes obj's status if it differs from orig's.
func (r *DeadLetterReplayReconciler) patchReplayStatus(ctx context.Context, orig, obj *kafkav1alpha1.DeadLetterReplay) error {
	if equality.Semantic.DeepEqual(orig.Status, obj.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, obj, client.MergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing status: %w", err)
	}
	return nil
}

// event emits a Kubernetes Event about the replay.
func (r *DeadLetterReplayReconciler) event(obj *kafkav1alpha1.DeadLetterReplay, eventType, reason, note string) {
	if r.Recorder == nil {
		return
	}
	const maxNote = 1024
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.Recorder.Eventf(obj, nil, eventType, reason, actionRunReplay, "%s", note)
}

func runningPhase(m kafkav1alpha1.ReplayMode) kafkav1alpha1.ReplayPhase {
	if m == kafkav1alpha1.ReplayApply {
		return kafkav1alpha1.ReplayApplying
	}
	return kafkav1alpha1.ReplayDryRunning
}

func runningReason(m kafkav1alpha1.ReplayMode) string {
	if m == kafkav1alpha1.ReplayApply {
		return kafkav1alpha1.ReasonApplying
	}
	return kafkav1alpha1.ReasonDryRunning
}

func modeNoun(m kafkav1alpha1.ReplayMode) string {
	if m == kafkav1alpha1.ReplayApply {
		return "replay"
	}
	return "dry run"
}

// byReasonText is " (handler_failed 3, not_json 1)", sorted by reason.
func byReasonText(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// replayCutoff is the cutoff of a replay created at now: whole seconds, as
// the API stores a metav1.Time, rounded up, so that every dead letter
// written before the object (also earlier in the same second) is selected.
// Truncating dropped those: a DeadLetterReplay created 300 ms after a burst
// of dead letters selected none of them. The dead letters of the rest of
// that second are taken too; a replay's own write-backs never are (they
// carry its id).
func replayCutoff(now time.Time) time.Time {
	c := now.UTC().Truncate(time.Second)
	if c.Before(now) {
		c = c.Add(time.Second)
	}
	return c
}
