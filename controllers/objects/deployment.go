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

// Package objects holds the operator's object builders: the consumer
// Deployment (with its environment, from consumer/envvars), the KEDA
// ScaledObject and TriggerAuthentication, and the pod Pod Security admission
// is asked about. They are pure functions of an IdempotentConsumer and a few
// options, with no client, clock or randomness, so they are tested as plain
// functions and reused by tests outside controllers/ (config/); the
// reconciler in controllers/ decides when to apply what they return.
package objects

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"path"
	"slices"
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
	"github.com/idempotency-dev/operator/consumer/version"
)

// ConsumerRepository is the ready-made consumer's (cmd/consumer) image
// repository.
const ConsumerRepository = "ghcr.io/idempotency-dev/consumer"

// DefaultConsumerImage is the ready-made consumer released with this build of
// the operator (the two are released together from one tag), used when
// neither spec.consumer.image nor the manager's --consumer-image is set.
// Never :latest, so that an operator does not run a consumer of another
// release by accident.
var DefaultConsumerImage = ConsumerRepository + ":" + version.Get().Version

// Labels and annotations the builder sets.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"

	// ManagedByValue marks Deployments this operator manages; the manager's
	// cache holds only Deployments with it.
	ManagedByValue = "idempotency-operator"

	// AnnotationConfigHash on the pod template changes whenever a referenced
	// Secret's value changes, so the consumer rolls out with new credentials
	// (environment variables from Secrets are read only at container start).
	AnnotationConfigHash = "kafka.idempotency.dev/config-hash"
	// AnnotationSpecHash on the Deployment is the hash of what the builder
	// produced; an unchanged hash lets a reconcile skip the apply.
	AnnotationSpecHash = "kafka.idempotency.dev/spec-hash"
)

// Consumer container constants.
const (
	ConsumerContainer = "consumer"
	consumerPort      = 8080
	consumerPortName  = "http"
	tlsMountDir       = "/etc/idempotency/kafka-tls"
	tmpVolume         = "tmp"
	consumerUID       = 65532 // the distroless "nonroot" user
)

// deploymentSuffix ends the name of every consumer Deployment.
const deploymentSuffix = "-consumer"

// DeploymentName is the consumer Deployment's name for an object.
func DeploymentName(obj *kafkav1alpha1.IdempotentConsumer) string {
	return obj.Name + deploymentSuffix
}

// ConsumerNameOf is the inverse of DeploymentName: the name of the object
// whose consumer Deployment would be called deployment, and whether there is
// one.
func ConsumerNameOf(deployment string) (string, bool) {
	name, ok := strings.CutSuffix(deployment, deploymentSuffix)
	return name, ok && name != ""
}

// SelectorLabels select the consumer pods of one object. They are part of
// the Deployment's immutable selector, so they never change.
func SelectorLabels(obj *kafkav1alpha1.IdempotentConsumer) map[string]string {
	return map[string]string{
		LabelName:     "idempotent-consumer",
		LabelInstance: obj.Name,
	}
}

// Options are the inputs of Deployment besides the object.
type Options struct {
	// DefaultImage is used when spec.consumer.image is empty.
	DefaultImage string
	// ConfigHash goes into the pod template (see AnnotationConfigHash).
	ConfigHash string
	// Autoscaled leaves spec.replicas out: KEDA's HPA owns it, and the
	// operator's server-side apply must not fight it.
	Autoscaled bool
}

// Deployment returns the consumer Deployment for obj. It is a pure
// function of its inputs: no client, no clock, no randomness. The result
// carries a controller owner reference to obj (which must have a UID), so
// the Deployment is garbage-collected with it.
func Deployment(obj *kafkav1alpha1.IdempotentConsumer, opts Options) *appsv1.Deployment {
	selector := SelectorLabels(obj)
	labels := map[string]string{
		LabelComponent: "consumer",
		LabelManagedBy: ManagedByValue,
		LabelPartOf:    "idempotency-operator",
	}
	maps.Copy(labels, selector)
	pt := obj.Spec.Consumer.PodTemplate
	if pt == nil {
		pt = &kafkav1alpha1.PodTemplateOverrides{}
	}
	podLabels, podAnnotations := podMetadata(pt, labels, opts.ConfigHash)

	dep := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      DeploymentName(obj),
			Namespace: obj.Namespace,
			Labels:    labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         kafkav1alpha1.GroupVersion.String(),
				Kind:               "IdempotentConsumer",
				Name:               obj.Name,
				UID:                obj.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To(obj.Replicas()),
			Selector:             &metav1.LabelSelector{MatchLabels: selector},
			RevisionHistoryLimit: ptr.To(int32(3)),
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					// A consumer group rebalances on every membership change;
					// replace one pod at a time and never run above the count.
					MaxUnavailable: ptr.To(intstr.FromInt32(1)),
					MaxSurge:       ptr.To(intstr.FromInt32(0)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec:       consumerPodSpec(obj, pt, opts.DefaultImage),
			},
		},
	}
	if opts.Autoscaled {
		dep.Spec.Replicas = nil
	}
	dep.Annotations = map[string]string{AnnotationSpecHash: SpecHash(dep)}
	return dep
}

// podMetadata is the pod template's labels (the user's, then ours, which
// win) and annotations (the user's and the config hash; nil when empty).
func podMetadata(pt *kafkav1alpha1.PodTemplateOverrides, labels map[string]string, configHash string) (map[string]string, map[string]string) {
	podLabels := map[string]string{}
	podAnnotations := map[string]string{}
	maps.Copy(podLabels, pt.Labels)
	maps.Copy(podLabels, labels) // ours win
	maps.Copy(podAnnotations, pt.Annotations)
	if configHash != "" {
		podAnnotations[AnnotationConfigHash] = configHash
	}
	if len(podAnnotations) == 0 {
		podAnnotations = nil
	}
	return podLabels, podAnnotations
}

// consumerPodSpec is the pod spec: the consumer container, its volumes, a
// restricted security context, and the scheduling fields of the pod
// template overrides.
func consumerPodSpec(obj *kafkav1alpha1.IdempotentConsumer, pt *kafkav1alpha1.PodTemplateOverrides, defaultImage string) corev1.PodSpec {
	env, volumes, mounts := consumerEnv(obj)
	volumes = append([]corev1.Volume{{
		Name:         tmpVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}},
	}}, volumes...)
	mounts = append([]corev1.VolumeMount{{Name: tmpVolume, MountPath: "/tmp"}}, mounts...)

	return corev1.PodSpec{
		Containers:                    []corev1.Container{buildConsumerContainer(obj.Spec.Consumer, defaultImage, env, mounts)},
		Volumes:                       volumes,
		ServiceAccountName:            pt.ServiceAccountName,
		AutomountServiceAccountToken:  ptr.To(false), // the consumer never talks to the API server
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(45)), // the consumer's shutdown timeout is 30s
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(int64(consumerUID)),
			RunAsGroup:     ptr.To(int64(consumerUID)),
			FSGroup:        ptr.To(int64(consumerUID)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		NodeSelector:              maps.Clone(pt.NodeSelector),
		Tolerations:               slices.Clone(pt.Tolerations),
		Affinity:                  pt.Affinity.DeepCopy(),
		TopologySpreadConstraints: slices.Clone(pt.TopologySpreadConstraints),
		PriorityClassName:         pt.PriorityClassName,
		ImagePullSecrets:          slices.Clone(pt.ImagePullSecrets),
	}
}

// buildConsumerContainer is the consumer container: image (spec, else the
// operator's default, else the one released with it), default resources
// unless the spec sets them, probes on the consumer's HTTP port, and a
// restricted security context.
func buildConsumerContainer(spec kafkav1alpha1.ConsumerSpec, defaultImage string, env []corev1.EnvVar, mounts []corev1.VolumeMount) corev1.Container {
	image := spec.Image
	if image == "" {
		image = defaultImage
	}
	if image == "" {
		image = DefaultConsumerImage
	}
	resources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		},
	}
	if spec.Resources != nil {
		resources = *spec.Resources.DeepCopy()
	}
	probe := func(p string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: p, Port: intstr.FromString(consumerPortName), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    period,
			TimeoutSeconds:   2,
			FailureThreshold: failures,
		}
	}
	return corev1.Container{
		Name:            ConsumerContainer,
		Image:           image,
		ImagePullPolicy: spec.ImagePullPolicy,
		Env:             env,
		Ports: []corev1.ContainerPort{{
			Name: consumerPortName, ContainerPort: consumerPort, Protocol: corev1.ProtocolTCP,
		}},
		Resources:      resources,
		VolumeMounts:   mounts,
		StartupProbe:   probe("/healthz", 2, 30),
		LivenessProbe:  probe("/healthz", 10, 3),
		ReadinessProbe: probe("/readyz", 5, 3),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			Privileged:               ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// SpecHash hashes the built Deployment's labels and spec.
func SpecHash(dep *appsv1.Deployment) string {
	b, _ := json.Marshal(struct {
		Labels map[string]string
		Spec   appsv1.DeploymentSpec
	}{dep.Labels, dep.Spec})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// consumerEnv is the consumer's configuration as environment variables
// (named by consumer/envvars, the list cmd/consumer reads), with credentials
// as Secret references, plus the volumes for TLS files. The user's extra
// variables come last; any that would override one of ours is dropped.
func consumerEnv(obj *kafkav1alpha1.IdempotentConsumer) ([]corev1.EnvVar, []corev1.Volume, []corev1.VolumeMount) {
	k := obj.Spec.Kafka
	val := func(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }
	fromSecret := func(name string, ref kafkav1alpha1.SecretKeyRef) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name},
			Key:                  ref.Key,
		}}}
	}
	env := []corev1.EnvVar{
		val(envvars.Brokers, strings.Join(k.BootstrapServers, ",")),
		val(envvars.Topic, k.Topic),
		val(envvars.Group, k.GroupID),
		val(envvars.DeadLetterTopic, obj.DeadLetterTopic()),
		val(envvars.ClientID, obj.Namespace+"."+obj.Name),
		fromSecret(envvars.DatabaseURL, obj.ConsumerDatabaseURLRef()),
		val(envvars.TableSchema, obj.SchemaName()),
		val(envvars.TableName, obj.TableName()),
		val(envvars.DedupScope, string(obj.Scope())),
		val(envvars.BatchMaxMessages, strconv.Itoa(int(obj.BatchMaxMessages()))),
		val(envvars.BatchMaxWait, obj.BatchMaxWait().String()),
		val(envvars.PolicyOutsideWindow, string(obj.OutOfWindowPolicy())),
		val(envvars.ListenAddr, ":"+strconv.Itoa(consumerPort)),
		// The consumer sizes its prefetch and batches, and the Go runtime's
		// memory limit, to the container's memory limit.
		{Name: envvars.MemoryLimit, ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
			ContainerName: ConsumerContainer, Resource: "limits.memory",
		}}},
	}
	if o := obj.Spec.Consumer.Ordering; o != "" {
		env = append(env, val(envvars.Ordering, string(o)))
	}
	if n := obj.Spec.Consumer.MaxInFlight; n != nil {
		env = append(env, val(envvars.MaxInFlight, strconv.Itoa(int(*n))))
	}

	sink := obj.Spec.Consumer.Sink
	switch sink.Type {
	case kafkav1alpha1.SinkHTTP:
		env = append(env, val(envvars.Sink, "http"))
		if h := sink.HTTP; h != nil {
			env = append(env, val(envvars.SinkHTTPURL, h.URL))
			if h.Timeout != nil {
				env = append(env, val(envvars.SinkHTTPTimeout, h.Timeout.Duration.String()))
			}
			if h.AuthorizationSecretRef != nil {
				env = append(env, fromSecret(envvars.SinkHTTPAuthorization, *h.AuthorizationSecretRef))
			}
			if h.IdempotencyKey != "" {
				// Only when set: the consumer's default is the bare event
				// id, and an unset field leaves the pod template as it was.
				env = append(env, val(envvars.SinkHTTPIdempotencyKey, h.IdempotencyKey))
			}
		}
	case kafkav1alpha1.SinkSQL:
		env = append(env, val(envvars.Sink, "sql"))
		if q := sink.SQL; q != nil {
			env = append(env, val(envvars.SinkSQLStatement, q.Statement))
		}
	case kafkav1alpha1.SinkLog:
		env = append(env, val(envvars.Sink, "log"))
	default:
		env = append(env, val(envvars.Sink, "none"))
	}

	dbEnv, volumes, mounts := databaseCAEnv(obj.Spec.Database.CASecretRef)
	env = append(env, dbEnv...)
	kEnv, kVolumes, kMounts := kafkaClientEnv(k.TLS, k.SASL)
	env, volumes, mounts = append(env, kEnv...), append(volumes, kVolumes...), append(mounts, kMounts...)

	// Stored objects (from before the API refused ReservedEnv in
	// spec.consumer.env) keep what they had: only the variables this object
	// gets from the operator, and DATABASE_URL, are dropped.
	ours := map[string]bool{envvars.DatabaseURLFallback: true}
	for _, e := range env {
		ours[e.Name] = true
	}
	for _, e := range obj.Spec.Consumer.Env {
		if !ours[e.Name] {
			env = append(env, *e.DeepCopy())
		}
	}
	return env, volumes, mounts
}

// ReservedEnv lists every variable consumerEnv may set, for any object,
// and DATABASE_URL (the consumer reads it when CONSUMER_DATABASE_URL is
// unset). The API refuses them in spec.consumer.env: the CEL rule on that
// field (api/v1alpha1 ConsumerSpec.Env) spells
// the same list, and TestReservedEnvAgreesWithTheCRD checks both ways.
var ReservedEnv = []string{
	envvars.Brokers, envvars.Topic, envvars.Group, envvars.DeadLetterTopic, envvars.ClientID,
	envvars.DatabaseURL, envvars.DatabaseURLFallback, envvars.TableSchema, envvars.TableName, envvars.DedupScope,
	envvars.BatchMaxMessages, envvars.BatchMaxWait, envvars.PolicyOutsideWindow, envvars.ListenAddr,
	envvars.MemoryLimit, envvars.Ordering, envvars.MaxInFlight, envvars.Sink, envvars.SinkHTTPURL,
	envvars.SinkHTTPTimeout, envvars.SinkHTTPAuthorization, envvars.SinkHTTPIdempotencyKey, envvars.SinkSQLStatement,
	envvars.TLSEnabled, envvars.TLSInsecureSkipVerify, envvars.TLSCAFile, envvars.TLSCertFile, envvars.TLSKeyFile,
	envvars.SASLMechanism, envvars.SASLUsername, envvars.SASLPassword, EnvPGSSLRootCert, EnvPGSSLMode,
}

// Environment variables the consumer Deployment sets for a PostgreSQL CA.
// pgx (like libpq) reads them as sslrootcert and sslmode when the URL does
// not set those keys itself, so every consumer built on pgx or libpq uses
// the mounted CA without knowing about it.
const (
	EnvPGSSLRootCert = "PGSSLROOTCERT"
	EnvPGSSLMode     = "PGSSLMODE"
	// pgCAMountDir holds the CA file in the consumer container.
	pgCAMountDir = "/etc/idempotency/postgres-tls"
	PGCAVolume   = "postgres-ca"
	pgCAFile     = "ca.crt"
)

// databaseCAEnv mounts the PostgreSQL CA of ref, if any, and points
// PGSSLROOTCERT at it with PGSSLMODE verify-full.
func databaseCAEnv(ref *kafkav1alpha1.SecretKeyRef) ([]corev1.EnvVar, []corev1.Volume, []corev1.VolumeMount) {
	if ref == nil {
		return nil, nil, nil
	}
	// pgx reads these as sslrootcert and sslmode unless the URL sets
	// them; the operator refuses a URL that sets either against a CA
	// (see parsePoolConfig in controllers/dbtls.go), so the consumer verifies as the operator does.
	volumes := []corev1.Volume{{Name: PGCAVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName:  ref.Name,
		Items:       []corev1.KeyToPath{{Key: ref.Key, Path: pgCAFile}},
		DefaultMode: ptr.To(int32(0o440)),
	}}}}
	mounts := []corev1.VolumeMount{{Name: PGCAVolume, MountPath: pgCAMountDir, ReadOnly: true}}
	env := []corev1.EnvVar{{Name: EnvPGSSLRootCert, Value: path.Join(pgCAMountDir, pgCAFile)}, {Name: EnvPGSSLMode, Value: "verify-full"}}
	return env, volumes, mounts
}

// secretEnv is a variable read from a Secret key.
func secretEnv(name string, ref kafkav1alpha1.SecretKeyRef) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name},
		Key:                  ref.Key,
	}}}
}

// kafkaClientEnv is the Kafka TLS and SASL configuration (CONSUMER_TLS_*,
// CONSUMER_SASL_*): certificates mounted as files, credentials as Secret
// references. The consumer and the outbox relay read the same variables.
func kafkaClientEnv(t *kafkav1alpha1.KafkaTLS, s *kafkav1alpha1.KafkaSASL) ([]corev1.EnvVar, []corev1.Volume, []corev1.VolumeMount) {
	val := func(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }
	var env []corev1.EnvVar
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	if t != nil {
		env = append(env, val(envvars.TLSEnabled, "true"))
		if t.InsecureSkipVerify {
			env = append(env, val(envvars.TLSInsecureSkipVerify, "true"))
		}
		file := func(envName, volName, fileName string, ref *kafkav1alpha1.SecretKeyRef) {
			if ref == nil {
				return
			}
			dir := path.Join(tlsMountDir, volName)
			volumes = append(volumes, corev1.Volume{Name: volName, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName:  ref.Name,
				Items:       []corev1.KeyToPath{{Key: ref.Key, Path: fileName}},
				DefaultMode: ptr.To(int32(0o440)),
			}}})
			mounts = append(mounts, corev1.VolumeMount{Name: volName, MountPath: dir, ReadOnly: true})
			env = append(env, val(envName, path.Join(dir, fileName)))
		}
		file(envvars.TLSCAFile, "kafka-tls-ca", "ca.crt", t.CASecretRef)
		file(envvars.TLSCertFile, "kafka-tls-cert", "tls.crt", t.ClientCertSecretRef)
		file(envvars.TLSKeyFile, "kafka-tls-key", "tls.key", t.ClientKeySecretRef)
	}
	if s != nil {
		env = append(env,
			val(envvars.SASLMechanism, string(s.Mechanism)),
			secretEnv(envvars.SASLUsername, s.UsernameSecretRef),
			secretEnv(envvars.SASLPassword, s.PasswordSecretRef),
		)
	}

	return env, volumes, mounts
}
