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
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// The outbox relay Deployment: `consumer outbox-relay` from the consumer
// image, configured by CONSUMER_* variables from the Outbox's spec, with
// credentials from Secrets only, and the consumer's restricted pod. Without
// CONSUMER_OUTBOX_OWNER: the operator makes the table and keeps its
// partitions, the relay only publishes.

// Relay labels and names. config/monitoring's PodMonitor selects the relay
// pods by LabelName RelayName and scrapes the port named "http".
const (
	// RelayName is the relay pods' app.kubernetes.io/name.
	RelayName = "outbox-relay"
	// RelayContainer is the relay container's name.
	RelayContainer = "relay"
	// relaySubcommand is consumer/app.OutboxSubcommand (not imported: the
	// builders import nothing of the runtime but its variable names).
	relaySubcommand = "outbox-relay"
	relaySuffix     = "-outbox-relay"
)

// RelayDeploymentName is the relay Deployment's name for an Outbox.
func RelayDeploymentName(obj *kafkav1alpha1.Outbox) string { return obj.Name + relaySuffix }

// OutboxNameOf is the inverse of RelayDeploymentName.
func OutboxNameOf(deployment string) (string, bool) {
	name, ok := strings.CutSuffix(deployment, relaySuffix)
	return name, ok && name != ""
}

// RelaySelectorLabels select the relay pods of one Outbox (the
// Deployment's immutable selector).
func RelaySelectorLabels(obj *kafkav1alpha1.Outbox) map[string]string {
	return map[string]string{LabelName: RelayName, LabelInstance: obj.Name}
}

// RelayDeployment returns the relay Deployment of obj: a pure function of
// its inputs, with a controller owner reference to obj (garbage-collected
// with it). opts.Autoscaled is ignored.
func RelayDeployment(obj *kafkav1alpha1.Outbox, opts Options) *appsv1.Deployment {
	selector := RelaySelectorLabels(obj)
	labels := map[string]string{
		LabelComponent: "outbox-relay",
		LabelManagedBy: ManagedByValue,
		LabelPartOf:    "idempotency-operator",
	}
	maps.Copy(labels, selector)
	pt := obj.Spec.Relay.PodTemplate
	if pt == nil {
		pt = &kafkav1alpha1.PodTemplateOverrides{}
	}
	podLabels, podAnnotations := podMetadata(pt, labels, opts.ConfigHash)

	env, volumes, mounts := relayEnv(obj)
	volumes = append([]corev1.Volume{{
		Name:         tmpVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}},
	}}, volumes...)
	mounts = append([]corev1.VolumeMount{{Name: tmpVolume, MountPath: "/tmp"}}, mounts...)
	container := buildConsumerContainer(kafkav1alpha1.ConsumerSpec{
		Image: obj.Spec.Relay.Image, ImagePullPolicy: obj.Spec.Relay.ImagePullPolicy, Resources: obj.Spec.Relay.Resources,
	}, opts.DefaultImage, env, mounts)
	container.Name = RelayContainer
	container.Args = []string{relaySubcommand}
	// The relay serves /healthz and /metrics; it has no /readyz (a standby
	// is as ready as the owner: it takes over when the owner goes).
	container.ReadinessProbe.HTTPGet.Path = "/healthz"

	podSpec := corev1.PodSpec{
		Containers:                    []corev1.Container{container},
		Volumes:                       volumes,
		ServiceAccountName:            pt.ServiceAccountName,
		AutomountServiceAccountToken:  ptr.To(false), // the relay never talks to the API server
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(45)),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(int64(consumerUID)),
			RunAsGroup:     ptr.To(int64(consumerUID)),
			FSGroup:        ptr.To(int64(consumerUID)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		NodeSelector:              maps.Clone(pt.NodeSelector),
		Tolerations:               append([]corev1.Toleration(nil), pt.Tolerations...),
		Affinity:                  pt.Affinity.DeepCopy(),
		TopologySpreadConstraints: append([]corev1.TopologySpreadConstraint(nil), pt.TopologySpreadConstraints...),
		PriorityClassName:         pt.PriorityClassName,
		ImagePullSecrets:          append([]corev1.LocalObjectReference(nil), pt.ImagePullSecrets...),
	}
	dep := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      RelayDeploymentName(obj),
			Namespace: obj.Namespace,
			Labels:    labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         kafkav1alpha1.GroupVersion.String(),
				Kind:               "Outbox",
				Name:               obj.Name,
				UID:                obj.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To(obj.RelayReplicas()),
			Selector:             &metav1.LabelSelector{MatchLabels: selector},
			RevisionHistoryLimit: ptr.To(int32(3)),
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					// A standby stays up while the pods are replaced: start
					// the new one first, one at a time.
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
					MaxSurge:       ptr.To(intstr.FromInt32(1)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec:       podSpec,
			},
		},
	}
	dep.Annotations = map[string]string{AnnotationSpecHash: SpecHash(dep)}
	return dep
}

// relayEnv is the relay's configuration (consumer/envvars), credentials
// as Secret references.
func relayEnv(obj *kafkav1alpha1.Outbox) ([]corev1.EnvVar, []corev1.Volume, []corev1.VolumeMount) {
	val := func(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }
	env := []corev1.EnvVar{
		val(envvars.Brokers, strings.Join(obj.Spec.Kafka.BootstrapServers, ",")),
		secretEnv(envvars.DatabaseURL, obj.RelayDatabaseURLRef()),
		val(envvars.OutboxSchema, obj.SchemaName()),
		val(envvars.OutboxTable, obj.TableName()),
		val(envvars.OutboxInterval, string(obj.Interval())),
		val(envvars.OutboxPollInterval, obj.PollInterval().String()),
		val(envvars.OutboxBatchSize, strconv.Itoa(int(obj.BatchSize()))),
		val(envvars.OutboxMaxMessageBytes, strconv.Itoa(int(obj.MaxMessageBytes()))),
		val(envvars.OutboxPublishTimeout, obj.PublishTimeout().String()),
		val(envvars.ListenAddr, ":"+strconv.Itoa(consumerPort)),
	}
	dbEnv, volumes, mounts := databaseCAEnv(obj.Spec.Database.CASecretRef)
	env = append(env, dbEnv...)
	kEnv, kVolumes, kMounts := kafkaClientEnv(obj.Spec.Kafka.TLS, obj.Spec.Kafka.SASL)
	return append(env, kEnv...), append(volumes, kVolumes...), append(mounts, kMounts...)
}
