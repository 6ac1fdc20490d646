package localstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/idempotency-dev/operator/consumer/replay"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// RunJob plays the kubelet and the Job controller for a Job the operator
// made (a DeadLetterReplay's): it runs the pod template's first container
// once as a local process, as StartReplicas does for a Deployment (its
// arguments and its env with Secret and field references resolved), waits
// for it to exit, and writes what a cluster would: a Pod of the Job (its
// template's labels, owned by the Job) whose container status carries the
// exit code and the termination message (the file the container names as
// its terminationMessagePath; the process writes it at the path
// REPLAY_RESULT_FILE gives it, here a file in work), then the Job's status
// (Complete or Failed, with the conditions the Job controller sets). A
// failed process is not retried.
func RunJob(ctx context.Context, k8s client.Client, job *batchv1.Job, binary, work string, verbose io.Writer) error {
	spec := job.Spec.Template.Spec
	if len(spec.Containers) == 0 {
		return fmt.Errorf("job %s has no containers", job.Name)
	}
	c := spec.Containers[0]
	podName := job.Name + "-local"
	env, err := ResolveEnv(ctx, k8s, job.Namespace, podName, c)
	if err != nil {
		return err
	}
	resultFile := filepath.Join(work, podName+".termination-log")
	_ = os.Remove(resultFile)
	env = SetEnv(env, replay.EnvResultFile, resultFile)
	args := append([]string{}, c.Args...)
	if len(c.Command) > 1 {
		args = append(append([]string{}, c.Command[1:]...), c.Args...)
	}
	start := metav1.NewTime(time.Now().Truncate(time.Second))
	p, err := StartConsumer(podName, proc.Options{LogDir: work, Stream: verbose, Env: env}, binary, args...)
	if err != nil {
		return err
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		p.Stop(10 * time.Second)
		return ctx.Err()
	}
	exit := int32(0)
	if err := p.Err(); err != nil {
		exit = 1
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			exit = int32(ee.ExitCode()) //nolint:gosec // G115: an exit code
		}
	}
	msg, _ := os.ReadFile(resultFile) //nolint:gosec // G304: the file this function named
	finished := metav1.NewTime(time.Now().Truncate(time.Second))

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: job.Namespace, Name: podName, Labels: job.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: *spec.DeepCopy(),
	}
	if err := k8s.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pod %s: %w", podName, err)
	}
	phase := corev1.PodSucceeded
	if exit != 0 {
		phase = corev1.PodFailed
	}
	pod.Status = corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Message: strings.TrimSpace(string(msg)), StartedAt: start, FinishedAt: finished,
		}},
	}}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("reporting pod %s: %w", podName, err)
	}

	cond := func(ty batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: ty, Status: corev1.ConditionTrue, Reason: reason, Message: "local process " + podName,
			LastProbeTime: finished, LastTransitionTime: finished}
	}
	for range 10 {
		cur := &batchv1.Job{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			return err
		}
		cur.Status = batchv1.JobStatus{StartTime: &start}
		if exit == 0 {
			cur.Status.Succeeded = 1
			cur.Status.CompletionTime = &finished
			cur.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), cond(batchv1.JobComplete, "CompletionsReached")}
		} else {
			cur.Status.Failed = 1
			cur.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, "BackoffLimitExceeded"), cond(batchv1.JobFailed, "BackoffLimitExceeded")}
		}
		err := k8s.Status().Update(ctx, cur)
		if err == nil {
			if exit != 0 {
				return fmt.Errorf("job %s: the process failed: %w\n%s", job.Name, p.ExitErr(), p.TailLog(20))
			}
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("reporting Job %s: %w", job.Name, err)
		}
	}
	return fmt.Errorf("reporting Job %s: conflicts", job.Name)
}

// jobFinished: the Job has a Complete or Failed condition.
func jobFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
