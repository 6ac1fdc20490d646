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

// The status the operator writes.

// IdempotentConsumerStatus is what the operator observed on its last
// reconcile.
type IdempotentConsumerStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready (the summary), DatabaseReady, PartitionsReady,
	// ConsumerReady (absent without spec.consumer), KafkaReady (brokers
	// reached, topic and dead-letter topic found; it affects Ready only
	// with spec.consumer), the kstatus conventions
	// Reconciling and Stalled, and the warnings TopicRetentionCovered,
	// ReplicasWithinPartitions, DatabaseDurable, DatabaseRoles and
	// AutoscalingReady, which do not affect Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// table is the qualified name of the processed_event table.
	// +optional
	Table string `json:"table,omitempty"`

	// window is the dedup window the partitions cover now.
	// +optional
	Window *DedupWindow `json:"window,omitempty"`

	// partitions summarises the table's partitions.
	// +optional
	Partitions *PartitionsStatus `json:"partitions,omitempty"`

	// lastMaintenanceTime is when partition maintenance last ran on schedule
	// or last created or dropped a partition.
	// +optional
	LastMaintenanceTime *metav1.Time `json:"lastMaintenanceTime,omitempty"`

	// nextMaintenanceTime is when the operator will next maintain the
	// partitions: the next partition boundary or expiry, minus a lead time.
	// +optional
	NextMaintenanceTime *metav1.Time `json:"nextMaintenanceTime,omitempty"`

	// deploymentName is the consumer Deployment.
	// +optional
	DeploymentName string `json:"deploymentName,omitempty"`

	// replicas is the consumer Deployment's current replica count (for the
	// scale subresource).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the consumer Deployment's ready replica count.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// selector is the consumer pods' label selector (for the scale subresource).
	// +optional
	Selector string `json:"selector,omitempty"`

	// topic is what the operator last read from the brokers about
	// spec.kafka.topic and the dead-letter topic (re-read every few minutes at
	// most, on the reconciles that happen anyway).
	// +optional
	Topic *TopicStatus `json:"topic,omitempty"`

	// scaledObjectName is the KEDA ScaledObject the operator created for
	// spec.autoscaling, if any.
	// +optional
	ScaledObjectName string `json:"scaledObjectName,omitempty"`

	// consumerRole is the database role the operator last granted the
	// consumer's privileges to (spec.database.consumerURLSecretRef), and
	// the consumer group its policies admit: what it takes back when either
	// changes. Empty in the single-role setup.
	// +optional
	ConsumerRole *ConsumerRoleStatus `json:"consumerRole,omitempty"`

	// applicationSecretName is the Secret "<name>-app" the operator keeps
	// with what an application needs to use the table: the keys schema,
	// table, scope, consumerGroup, claimFunction, claimOneFunction,
	// positionsTable and, with spec.database.consumerURLSecretRef, uri (the
	// consumer role's connection URL). Set once the table is ready.
	// +optional
	ApplicationSecretName string `json:"applicationSecretName,omitempty"`

	// sharedTable is present with spec.dedup.sharing Shared: who is
	// registered on the table and the policy its partitions are kept with.
	// +optional
	SharedTable *SharedTableStatus `json:"sharedTable,omitempty"`

	// idempotencyKey is the Idempotency-Key template the HTTP sink's
	// Deployment was last given ("{eventId}" when
	// spec.consumer.sink.http.idempotencyKey is empty), and when and from
	// what it last changed.
	// +optional
	IdempotencyKey *IdempotencyKeyStatus `json:"idempotencyKey,omitempty"`

	// retention is the dedup retention partitions are dropped by, and a
	// decrease of spec.dedup.retention waiting out its grace period.
	// +optional
	Retention *RetentionStatus `json:"retention,omitempty"`

	// platform says which CloudNativePG and Strimzi objects, Secrets and
	// endpoints were used (docs/platforms.md).
	// +optional
	Platform *PlatformStatus `json:"platform,omitempty"`

	// deadLetterReplays sums the DeadLetterReplay objects that name this
	// consumer (docs/dead-letters.md, "Depth"); absent while there are none.
	// +optional
	DeadLetterReplays *DeadLetterReplaysStatus `json:"deadLetterReplays,omitempty"`
}

// RetentionStatus is the retention partition maintenance drops by.
type RetentionStatus struct {
	// applied is the retention expired partitions are dropped by: the spec's
	// (a shared table's longest registered), or while a decrease waits out
	// its grace period the retention before it.
	Applied string `json:"applied"`

	// pendingDecrease is present while a lower retention waits out
	// spec.dedup.retentionDecreaseGrace: raise spec.dedup.retention back to
	// applied before dropTime to keep every partition.
	// +optional
	PendingDecrease *RetentionDecrease `json:"pendingDecrease,omitempty"`
}

// RetentionDecrease is a lower retention that is not applied yet.
type RetentionDecrease struct {
	// retention is the lowered retention, applied at dropTime.
	Retention string `json:"retention"`
	// detectedTime is when the operator first saw it.
	DetectedTime metav1.Time `json:"detectedTime"`
	// dropTime is when the grace period ends and the partitions expired
	// under the lowered retention are dropped.
	DropTime metav1.Time `json:"dropTime"`
	// partitionCount is how many partitions the decrease will drop at
	// dropTime that the applied retention would keep.
	// +optional
	PartitionCount int32 `json:"partitionCount,omitempty"`
	// partitions are the first of them, oldest first.
	// +optional
	// +listType=atomic
	Partitions []string `json:"partitions,omitempty"`
	// forgetBefore: ids of events from before this time are forgotten at
	// dropTime (the end of the newest partition the decrease drops).
	// +optional
	ForgetBefore *metav1.Time `json:"forgetBefore,omitempty"`
	// message says the same in a sentence.
	// +optional
	Message string `json:"message,omitempty"`
}

// IdempotencyKeyStatus records the HTTP sink's Idempotency-Key template.
type IdempotencyKeyStatus struct {
	// template in effect.
	Template string `json:"template"`
	// previous template, set when it changed on this object.
	// +optional
	Previous string `json:"previous,omitempty"`
	// changedTime is when the operator applied a changed template.
	// +optional
	ChangedTime *metav1.Time `json:"changedTime,omitempty"`
}

// SharedTableStatus describes a table that several objects use.
type SharedTableStatus struct {
	// users are the objects registered on the table, this one included,
	// oldest registration first.
	// +optional
	// +listType=atomic
	Users []SharedTableUser `json:"users,omitempty"`

	// effectiveRetention is the longest retention registered: partitions
	// are kept that long for every user.
	// +optional
	EffectiveRetention string `json:"effectiveRetention,omitempty"`

	// effectivePremake is the largest premake registered.
	// +optional
	EffectivePremake int32 `json:"effectivePremake,omitempty"`
}

// SharedTableUser is one object registered on a shared table.
type SharedTableUser struct {
	// object is the registered object, as namespace/name.
	Object string `json:"object"`
	// consumerGroup is its consumer group, the second column of its rows'
	// key.
	ConsumerGroup string `json:"consumerGroup"`
	// retention it asked for.
	// +optional
	Retention string `json:"retention,omitempty"`
	// premake it asked for.
	// +optional
	Premake int32 `json:"premake,omitempty"`
}

// ConsumerRoleStatus names the database role the consumer's privileges were
// granted to and the consumer group its policies admit.
type ConsumerRoleStatus struct {
	// role is the PostgreSQL role (the user of the consumer's URL).
	Role string `json:"role"`
	// group is the consumer group whose rows its policies admit.
	Group string `json:"group"`
}

// TopicStatus is what the brokers said about the topics.
type TopicStatus struct {
	// partitions of spec.kafka.topic.
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// retention of spec.kafka.topic: its retention.ms as a duration, or
	// "Infinite" (retention.ms -1, or a compacted topic).
	// +optional
	Retention string `json:"retention,omitempty"`

	// deadLetterRetention is the same for the dead-letter topic; empty when
	// that topic does not exist yet.
	// +optional
	DeadLetterRetention string `json:"deadLetterRetention,omitempty"`

	// observedTime is when the brokers last answered.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}

// DedupWindow is the range of event times the partitions cover: [from, to).
type DedupWindow struct {
	// from is the lower bound of the oldest partition.
	From metav1.Time `json:"from"`
	// to is the upper bound of the newest partition.
	To metav1.Time `json:"to"`
	// summary is "from/to" as an ISO 8601 interval, for display.
	// +optional
	Summary string `json:"summary,omitempty"`
}

// PartitionsStatus summarises the table's partitions.
type PartitionsStatus struct {
	// count of partitions attached to the table.
	Count int32 `json:"count"`
	// ahead is how many partitions lie wholly in the future: the margin left
	// if maintenance stopped now.
	Ahead int32 `json:"ahead"`
	// oldest partition's name.
	// +optional
	Oldest string `json:"oldest,omitempty"`
	// newest partition's name.
	// +optional
	Newest string `json:"newest,omitempty"`
}
