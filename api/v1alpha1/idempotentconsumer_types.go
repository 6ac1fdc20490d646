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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The IdempotentConsumer kind, its spec's top level, and the enums and
// SecretKeyRef the other files share. spec_types.go holds kafka, database,
// dedup and autoscaling; workload_types.go the consumer Deployment;
// status_types.go the status.

// DedupScope says which key the processed_event table deduplicates on.
// +kubebuilder:validation:Enum=ConsumerGroup;Global
type DedupScope string

const (
	// ScopeConsumerGroup keys the table by (event_id, consumer_group): several
	// consumer groups reading one topic each process every event once.
	ScopeConsumerGroup DedupScope = "ConsumerGroup"
	// ScopeGlobal keys the table by event_id alone: an event is processed once
	// by whichever group sees it first.
	ScopeGlobal DedupScope = "Global"
)

// PartitionInterval is the time span one partition of the table covers.
// +kubebuilder:validation:Enum=Hourly;Daily;Weekly;Monthly
type PartitionInterval string

const (
	IntervalHourly  PartitionInterval = "Hourly"
	IntervalDaily   PartitionInterval = "Daily"
	IntervalWeekly  PartitionInterval = "Weekly"
	IntervalMonthly PartitionInterval = "Monthly"
)

// OutOfWindowPolicy says what the consumer does with an event whose id falls
// outside the table's partitions, so it cannot be deduplicated.
// +kubebuilder:validation:Enum=DeadLetter;Skip;Stop;Process
type OutOfWindowPolicy string

const (
	// OutOfWindowDeadLetter sends the event to the dead-letter topic.
	OutOfWindowDeadLetter OutOfWindowPolicy = "DeadLetter"
	// OutOfWindowSkip drops the event (counted in the consumer's metrics).
	OutOfWindowSkip OutOfWindowPolicy = "Skip"
	// OutOfWindowStop stops the consumer on the event: its offset does not
	// move until the window is fixed or the policy changed.
	OutOfWindowStop OutOfWindowPolicy = "Stop"
	// OutOfWindowProcess processes the event without deduplication.
	OutOfWindowProcess OutOfWindowPolicy = "Process"
)

// DeletionPolicy says what happens to the table when the object is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionRetain keeps the table and its data.
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete drops the table, and only if this object created it.
	DeletionDelete DeletionPolicy = "Delete"
)

// TableSharing says whether several objects may use one table.
// +kubebuilder:validation:Enum=Exclusive;Shared
type TableSharing string

const (
	// SharingExclusive: the table belongs to one object.
	SharingExclusive TableSharing = "Exclusive"
	// SharingShared: objects with sharing Shared, each with its own consumer
	// group, use the table together.
	SharingShared TableSharing = "Shared"
)

// SinkType selects what the ready-made consumer does with each new event.
// +kubebuilder:validation:Enum=HTTP;SQL;Log;None
type SinkType string

const (
	// SinkHTTP POSTs each event to a URL with an Idempotency-Key header.
	SinkHTTP SinkType = "HTTP"
	// SinkSQL runs a statement per event in the dedup transaction.
	SinkSQL SinkType = "SQL"
	// SinkLog logs each new event (for trying things out).
	SinkLog SinkType = "Log"
	// SinkNone configures no sink: for a custom image that brings its own handler.
	SinkNone SinkType = "None"
)

// Ordering says which records of one Kafka partition the consumer may process
// at the same time.
// +kubebuilder:validation:Enum=Partition;Key;Unordered
type Ordering string

const (
	// OrderingPartition processes a partition's records one after another,
	// in offset order.
	OrderingPartition Ordering = "Partition"
	// OrderingKey processes records with different Kafka keys concurrently
	// and records with the same key in offset order.
	OrderingKey Ordering = "Key"
	// OrderingUnordered processes any of a partition's records concurrently.
	OrderingUnordered Ordering = "Unordered"
)

// SASLMechanism is a Kafka SASL mechanism.
// +kubebuilder:validation:Enum=PLAIN;SCRAM-SHA-256;SCRAM-SHA-512
type SASLMechanism string

const (
	SASLPlain       SASLMechanism = "PLAIN"
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// SecretKeyRef selects one key of a Secret in the object's namespace.
type SecretKeyRef struct {
	// name of the Secret, in the IdempotentConsumer's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// IdempotentConsumerSpec declares a Kafka consumer with an exactly-once effect:
// where it reads, which PostgreSQL table remembers what it has processed, how
// that table is partitioned and for how long it remembers, and how the consumer
// itself runs.
// +kubebuilder:validation:XValidation:rule="(has(self.dedup) && has(self.dedup.scope) && self.dedup.scope == 'Global') || self.kafka.groupID == oldSelf.kafka.groupID",message="kafka.groupID is immutable with dedup scope ConsumerGroup: the group is part of the dedup key, so a new group starts with an empty dedup history and, from the earliest offset, processes every event still in the topic again (every side effect repeated). To move to a new group on purpose, create a new IdempotentConsumer with it (docs/runbooks.md, Changing the consumer group)"
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !self.autoscaling.enabled || has(self.consumer)",message="autoscaling needs a consumer section: without one (table only) the operator runs no Deployment to scale"
type IdempotentConsumerSpec struct {
	// kafka says where the consumer reads from.
	// +required
	Kafka KafkaSpec `json:"kafka"`

	// database says which PostgreSQL database and table hold the dedup records.
	// +required
	Database DatabaseSpec `json:"database"`

	// dedup is the deduplication and partitioning policy.
	// +optional
	// +kubebuilder:default={}
	Dedup DedupSpec `json:"dedup,omitzero"`

	// consumer describes the consumer Deployment the operator runs. Absent
	// means table only: the operator creates and maintains the table and
	// publishes how to use it in the application Secret
	// (status.applicationSecretName), and runs no Deployment; the
	// application brings its own consumer (docs/any-language.md). Removing
	// the section from an object that had one deletes the Deployment the
	// operator ran for it; the table and its rows stay.
	// +optional
	Consumer ConsumerSpec `json:"consumer,omitzero"`

	// deletionPolicy says what happens to the table when this object is
	// deleted: Retain (the default) keeps it; Delete drops it, and only if this
	// object created it (its ownership marker is on the table).
	// +optional
	// +kubebuilder:default=Retain
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// suspend stops reconciliation: no DDL and no changes to the Deployment
	// while it is true. Partition maintenance stops too, so a long suspension
	// runs the table out of premade partitions. Deletion is still honoured.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// autoscaling lets KEDA scale the consumer Deployment on the consumer
	// group's lag. It needs KEDA (2.13 or later) in the cluster: the operator
	// then creates a ScaledObject and leaves the Deployment's replica count to
	// it, and spec.consumer.replicas is ignored. Without KEDA the condition
	// AutoscalingReady says so and spec.consumer.replicas (and the scale
	// subresource) keep working.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.consumer.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=ic;idc,categories=kafka
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Topic",type=string,JSONPath=`.spec.kafka.topic`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.kafka.groupID`
// +kubebuilder:printcolumn:name="Window",type=string,JSONPath=`.status.window.summary`
// +kubebuilder:printcolumn:name="Partitions",type=integer,JSONPath=`.status.partitions.count`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name must be at most 63 characters: it names the consumer Deployment and labels its pods"

// IdempotentConsumer is a Kafka consumer with an exactly-once effect: the
// operator creates and partitions its PostgreSQL processed_event table, keeps
// partitions premade and drops expired ones on schedule, and runs the consumer
// as a Deployment.
type IdempotentConsumer struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired state.
	// +required
	Spec IdempotentConsumerSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status IdempotentConsumerStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// IdempotentConsumerList is a list of IdempotentConsumers.
type IdempotentConsumerList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []IdempotentConsumer `json:"items"`
}
