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

package objects

import (
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// Labels of a replay's Jobs and pods.
const (
	// LabelReplay names the DeadLetterReplay a Job or pod runs.
	LabelReplay = "kafka.idempotency.dev/deadletterreplay"
	// LabelConsumer names the IdempotentConsumer whose dead letters it replays.
	LabelConsumer = "kafka.idempotency.dev/consumer"
)

// ReplayBackoffLimit is how many times a replay pod that failed (killed,
// its node lost, evicted) is replaced; each replacement resumes from the
// replay's durable progress.
const ReplayBackoffLimit = 6

// ReplayJobName is the name of a replay's Job in a mode: name-dryrun or
// name-apply (the API bounds the name so both fit a label value).
func ReplayJobName(dlr *kafkav1alpha1.DeadLetterReplay, mode kafkav1alpha1.ReplayMode) string {
	if mode == kafkav1alpha1.ReplayApply {
		return dlr.Name + "-apply"
	}
	return dlr.Name + "-dryrun"
}

// ReplayContainer is what the replay container adds to the consumer's: the
// contract of consumer/replay, which the caller spells (this package links
// nothing of the runtime's beyond its variable names).
type ReplayContainer struct {
	// Args is the command line (the replay subcommand).
	Args []string
	// Env is appended to the consumer's environment (REPLAY_SPEC).
	Env []corev1.EnvVar
	// ResultFile is where the container writes its Result; it becomes the
	// termination message.
	ResultFile string
}

// ReplayJob returns the Job that runs one mode of a DeadLetterReplay of ic:
// the consumer Deployment's pod spec (image, environment, Secret
// references, volumes, service account, security context, scheduling),
// with rc's arguments and variables, no ports or probes, the result file as
// the termination message, and restartPolicy Never. A failed pod is
// replaced up to ReplayBackoffLimit times and resumes. The Job carries a
// controller owner reference to dlr (which must have a UID), so deleting
// dlr deletes the Job and its pods. Like Deployment, it is a pure function.
func ReplayJob(dlr *kafkav1alpha1.DeadLetterReplay, ic *kafkav1alpha1.IdempotentConsumer, mode kafkav1alpha1.ReplayMode, defaultImage string, rc ReplayContainer) *batchv1.Job {
	labels := map[string]string{
		LabelManagedBy: ManagedByValue,
		LabelPartOf:    "idempotency-operator",
		LabelComponent: "replay",
		LabelReplay:    dlr.Name,
		LabelConsumer:  ic.Name,
	}
	pt := ic.Spec.Consumer.PodTemplate
	if pt == nil {
		pt = &kafkav1alpha1.PodTemplateOverrides{}
	}
	// The pods keep the consumer's app.kubernetes.io/name, so the consumer
	// egress NetworkPolicy (config/network-policy) lets them reach the
	// brokers and the database, but not its instance label: the consumer
	// Deployment's selector never matches them. Nor managed-by: the
	// consumer PodMonitor does not select them.
	podLabels := map[string]string{
		LabelName:      SelectorLabels(ic)[LabelName],
		LabelPartOf:    "idempotency-operator",
		LabelComponent: "replay",
		LabelReplay:    dlr.Name,
		LabelConsumer:  ic.Name,
	}
	podLabels, podAnnotations := podMetadata(pt, podLabels, "")

	spec := consumerPodSpec(ic, pt, defaultImage)
	spec.RestartPolicy = corev1.RestartPolicyNever
	c := &spec.Containers[0]
	c.Args = append([]string(nil), rc.Args...)
	c.Env = append(c.Env, rc.Env...)
	c.Ports = nil
	c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = nil, nil, nil
	c.TerminationMessagePath = rc.ResultFile
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile

	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      ReplayJobName(dlr, mode),
			Namespace: dlr.Namespace,
			Labels:    maps.Clone(labels),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         kafkav1alpha1.GroupVersion.String(),
				Kind:               "DeadLetterReplay",
				Name:               dlr.Name,
				UID:                dlr.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(ReplayBackoffLimit)),
			Completions:  ptr.To(int32(1)),
			Parallelism:  ptr.To(int32(1)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec:       spec,
			},
		},
	}
}
