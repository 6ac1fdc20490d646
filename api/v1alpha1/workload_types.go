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

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The spec's consumer section: the consumer Deployment, its sink, batching
// and pod overrides. (The file sorts after spec_types.go on purpose:
// controller-gen aliases imports in the order it meets them, and this order
// keeps zz_generated.deepcopy.go's aliases as they were.)

// ConsumerSpec describes the consumer Deployment.
// +kubebuilder:validation:XValidation:rule="self.sink.type != 'None' || has(self.image)",message="sink type None needs a custom image that brings its own handler: set consumer.image, or choose sink type HTTP or SQL"
// +kubebuilder:validation:XValidation:rule="!has(self.ordering) || self.ordering == 'Partition' || self.sink.type == 'HTTP' || self.sink.type == 'None'",message="ordering Key and Unordered are for the HTTP sink (or a custom image, sink type None): the SQL sink runs in the dedup transaction and keeps Partition ordering, and so does Log"
type ConsumerSpec struct {
	// image of the consumer. Empty means the operator's default consumer
	// image (the project's ready-made consumer, cmd/consumer).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	Image string `json:"image,omitempty"`

	// imagePullPolicy of the consumer container.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// replicas of the consumer Deployment. More replicas than the topic has
	// partitions leaves some idle (ReplicasWithinPartitions says so). Also
	// settable through the scale subresource. Ignored while KEDA scales the
	// consumer (spec.autoscaling).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// sink says what the ready-made consumer does with each new event.
	// +required
	Sink SinkSpec `json:"sink"`

	// batch limits: how many messages per Kafka partition go into one
	// transaction and one offset commit.
	// +optional
	// +kubebuilder:default={}
	Batch BatchSpec `json:"batch,omitzero"`

	// ordering says which records of one Kafka partition the consumer may
	// process at the same time: Partition (one after another, in offset
	// order), Key (records with different Kafka keys concurrently, records
	// with the same key in offset order) or Unordered (any records
	// concurrently). In every mode the offset is committed only past records
	// that are done. Empty means the sink's default: Key for HTTP, Partition
	// for SQL and Log. The SQL sink accepts only Partition.
	// +optional
	Ordering Ordering `json:"ordering,omitempty"`

	// maxInFlight bounds the records one consumer pod processes at the same
	// time, across all its partitions (for the HTTP sink: the requests in
	// flight). Empty means the consumer's default, 64. The SQL sink, which
	// processes each partition in order, ignores it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`

	// resources of the consumer container. Empty means modest defaults
	// (requests 50m CPU and 64Mi memory, limit 256Mi memory). The consumer
	// sizes its Kafka prefetch and batches to half the memory limit and sets
	// the Go runtime's memory limit to 70% of it (docs/consumer.md, "Memory
	// budget"); without a memory limit it is sized to the node's memory.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// env adds environment variables to the consumer container. Variables the
	// operator sets (see docs/operator.md) are refused here: set the spec
	// field they come from. The names below are controllers/objects.ReservedEnv
	// (a test checks that they agree); one rule each, so the message names it.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_BROKERS')",message="env CONSUMER_BROKERS: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_TOPIC')",message="env CONSUMER_TOPIC: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_GROUP')",message="env CONSUMER_GROUP: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_DEAD_LETTER_TOPIC')",message="env CONSUMER_DEAD_LETTER_TOPIC: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_CLIENT_ID')",message="env CONSUMER_CLIENT_ID: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_DATABASE_URL')",message="env CONSUMER_DATABASE_URL: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'DATABASE_URL')",message="env DATABASE_URL: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_TABLE_SCHEMA')",message="env CONSUMER_TABLE_SCHEMA: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_TABLE_NAME')",message="env CONSUMER_TABLE_NAME: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_DEDUP_SCOPE')",message="env CONSUMER_DEDUP_SCOPE: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_BATCH_MAX_MESSAGES')",message="env CONSUMER_BATCH_MAX_MESSAGES: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_BATCH_MAX_WAIT')",message="env CONSUMER_BATCH_MAX_WAIT: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_POLICY_OUTSIDE_WINDOW')",message="env CONSUMER_POLICY_OUTSIDE_WINDOW: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_LISTEN_ADDR')",message="env CONSUMER_LISTEN_ADDR: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_MEMORY_LIMIT')",message="env CONSUMER_MEMORY_LIMIT: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_ORDERING')",message="env CONSUMER_ORDERING: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_MAX_IN_FLIGHT')",message="env CONSUMER_MAX_IN_FLIGHT: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SINK')",message="env CONSUMER_SINK: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SINK_HTTP_URL')",message="env CONSUMER_SINK_HTTP_URL: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SINK_HTTP_TIMEOUT')",message="env CONSUMER_SINK_HTTP_TIMEOUT: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SINK_HTTP_AUTHORIZATION')",message="env CONSUMER_SINK_HTTP_AUTHORIZATION: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SINK_HTTP_IDEMPOTENCY_KEY')",message="env CONSUMER_SINK_HTTP_IDEMPOTENCY_KEY: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SINK_SQL_STATEMENT')",message="env CONSUMER_SINK_SQL_STATEMENT: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_TLS_ENABLED')",message="env CONSUMER_TLS_ENABLED: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_TLS_INSECURE_SKIP_VERIFY')",message="env CONSUMER_TLS_INSECURE_SKIP_VERIFY: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_TLS_CA_FILE')",message="env CONSUMER_TLS_CA_FILE: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_TLS_CERT_FILE')",message="env CONSUMER_TLS_CERT_FILE: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_TLS_KEY_FILE')",message="env CONSUMER_TLS_KEY_FILE: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SASL_MECHANISM')",message="env CONSUMER_SASL_MECHANISM: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SASL_USERNAME')",message="env CONSUMER_SASL_USERNAME: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'CONSUMER_SASL_PASSWORD')",message="env CONSUMER_SASL_PASSWORD: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'PGSSLROOTCERT')",message="env PGSSLROOTCERT: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name != 'PGSSLMODE')",message="env PGSSLMODE: the operator sets it itself, from the spec (docs/operator.md says from which field); set that field instead"
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// podTemplate overrides parts of the consumer's pod template.
	// +optional
	PodTemplate *PodTemplateOverrides `json:"podTemplate,omitempty"`
}

// SinkSpec is a union: type selects which of http or sql is set.
// +kubebuilder:validation:XValidation:rule="self.type == 'HTTP' ? has(self.http) : !has(self.http)",message="http must be set if and only if type is HTTP"
// +kubebuilder:validation:XValidation:rule="self.type == 'SQL' ? has(self.sql) : !has(self.sql)",message="sql must be set if and only if type is SQL"
type SinkSpec struct {
	// type of sink: HTTP, SQL, Log, or None (for a custom image with its own
	// handler).
	// +required
	Type SinkType `json:"type"`

	// http posts each new event to a URL with an Idempotency-Key header.
	// +optional
	HTTP *HTTPSinkSpec `json:"http,omitempty"`

	// sql runs one statement per new event in the dedup transaction.
	// +optional
	SQL *SQLSinkSpec `json:"sql,omitempty"`
}

// HTTPSinkSpec configures the HTTP sink.
type HTTPSinkSpec struct {
	// url the event is POSTed to.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	URL string `json:"url"`

	// timeout of one request. Default 10s.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// authorizationSecretRef selects a value sent as the Authorization header
	// (for example "Bearer <token>").
	// +optional
	AuthorizationSecretRef *SecretKeyRef `json:"authorizationSecretRef,omitempty"`

	// idempotencyKey is the template of the Idempotency-Key header. Empty
	// means the bare event id ("{eventId}"), the source design's rule. The
	// placeholders are {eventId} (required), {group} (the consumer group) and
	// {topic}; around them printable ASCII without spaces or braces. Use
	// "{group}:{eventId}" when two consumer groups with per-group dedup call
	// one provider account, or their keys collide. Changing it on a live
	// stream makes every redelivery of an event already sent look new to the
	// provider, which applies it again: the operator then records a Warning
	// Event and the condition IdempotencyKeyChanged.
	// +optional
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^([!-z|~]|\{(eventId|group|topic)\})*$')`,message="idempotencyKey may use only the placeholders {eventId}, {group} and {topic}, with printable ASCII other than spaces and braces around them"
	// +kubebuilder:validation:XValidation:rule="self.contains('{eventId}')",message="idempotencyKey must contain {eventId}: without it different events would share a key and the provider would drop all but the first"
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// SQLSinkSpec configures the SQL sink. The statement runs in the same
// transaction as the dedup insert, against the database of spec.database.
type SQLSinkSpec struct {
	// statement run once per new event, in the same transaction as the dedup
	// insert, so the business write and the dedup record commit together. The
	// parameters it receives (the event id, payload and Kafka coordinates) are
	// documented with the consumer in docs/consumer.md.
	// It must be one statement: a ';' may only end it, followed by nothing
	// but spaces, ';' and comments (a ';' inside a string literal or a
	// comment before the end counts too: write chr(59) in a literal).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[^;]*(;(\s|--[^\n;]*|/\*([^;*]|\*+[^;*/])*\*+/)*)*$')`,message="statement must hold one SQL statement: a ';' may only end it, followed by nothing but spaces and comments (the consumer runs one statement per event; PostgreSQL refuses more in a prepared statement). A ';' inside a string literal counts too: write chr(59) there"
	Statement string `json:"statement"`
}

// BatchSpec bounds one batch per Kafka partition.
type BatchSpec struct {
	// maxMessages per batch. Default 500.
	// +optional
	// +kubebuilder:default=500
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxMessages int32 `json:"maxMessages,omitempty"`

	// maxWait is the longest a batch waits to fill after its first record
	// while records keep arriving; a batch also closes as soon as no record
	// follows within 2ms, so a lone event is not delayed. Default 200ms.
	// +optional
	// +kubebuilder:default="200ms"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1m')",message="maxWait must be at most 1m"
	MaxWait *metav1.Duration `json:"maxWait,omitempty"`
}

// PodTemplateOverrides are the parts of the consumer pod template a user may
// set. The container, its security context and the operator's labels are not
// among them.
type PodTemplateOverrides struct {
	// labels added to the pods. The operator's own labels win on conflict.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the pods.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// serviceAccountName the pods run as. Empty means the namespace's default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// nodeSelector of the pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// affinity of the pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// topologySpreadConstraints of the pods.
	// +optional
	// +listType=atomic
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// priorityClassName of the pods.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// imagePullSecrets for the consumer image.
	// +optional
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
}
