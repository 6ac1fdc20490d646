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
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types.
const (
	// ConditionReady summarises the others: True when the database, the
	// partitions, the consumer and the topics it reads and dead-letters to
	// (KafkaReady; both only if spec.consumer is set) are all ready for the
	// current generation.
	ConditionReady = "Ready"
	// ConditionDatabaseReady: the Secret was read, the database reached, and
	// the table exists and carries this object's ownership marker.
	ConditionDatabaseReady = "DatabaseReady"
	// ConditionPartitionsReady: partitions cover the retention window and the
	// premade intervals ahead.
	ConditionPartitionsReady = "PartitionsReady"
	// ConditionConsumerReady: the consumer Deployment is rolled out and available.
	ConditionConsumerReady = "ConsumerReady"
	// ConditionReconciling (kstatus, abnormal-true): the operator is still
	// working towards the spec, or retrying a failure that retrying can fix.
	ConditionReconciling = "Reconciling"
	// ConditionStalled (kstatus, abnormal-true): the operator cannot make
	// progress without a change to the object, its Secret or the database.
	ConditionStalled = "Stalled"

	// ConditionKafkaReady: the operator reached the brokers of
	// spec.kafka.bootstrapServers and found the topic and, for an object
	// with spec.consumer, its dead-letter topic (<topic>.dlq by default).
	// False names what is wrong and the address or topic (BrokerUnreachable,
	// TopicNotFound, DeadLetterTopicNotFound, ...); the operator looks again
	// on a backoff (2s doubling up to 20s by default) until it is True,
	// so a topic created later turns the object Ready with no change to it.
	// With spec.consumer, a False KafkaReady makes Ready False with its
	// reason; a table-only object reports it without changing Ready.
	ConditionKafkaReady = "KafkaReady"

	// The warnings below never change Ready, Reconciling or Stalled: a
	// broker the operator cannot reach, or a missing KEDA, does not stop the
	// table, its partitions or the consumer.

	// ConditionTopicRetentionCovered: the dedup retention is at least the
	// retention of the topic and of the dead-letter topic, so a replay of
	// anything Kafka still holds is deduplicated. Unknown when the brokers
	// could not tell.
	ConditionTopicRetentionCovered = "TopicRetentionCovered"
	// ConditionReplicasWithinPartitions: the consumer runs no more replicas
	// than the topic has partitions (a replica beyond that sits idle).
	// Unknown when the brokers could not tell.
	ConditionReplicasWithinPartitions = "ReplicasWithinPartitions"
	// ConditionDatabaseDurable: a commit the database acknowledged survives
	// a server crash and a failover (synchronous_commit not off, every
	// standby synchronous). False names the risk (SynchronousCommitOff,
	// AsynchronousStandby): the consumer then redoes lost batches from Kafka
	// while the topic still holds them. Unknown when it could not be read.
	ConditionDatabaseDurable = "DatabaseDurable"
	// ConditionAutoscalingReady: present only with spec.autoscaling; True
	// when the KEDA ScaledObject is applied.
	ConditionAutoscalingReady = "AutoscalingReady"
	// ConditionDatabaseRoles: True when the consumer connects as a role of
	// its own (spec.database.consumerURLSecretRef) holding only the grants
	// the operator gave it. False says why not: SingleRole (no consumer URL:
	// the consumer uses the table owner's), ConsumerRoleUnrestricted (its
	// role owns the table, is a superuser or bypasses row-level security),
	// or what stopped the grant.
	ConditionDatabaseRoles = "DatabaseRoles"
	// ConditionIdempotencyKeyChanged: present once the HTTP sink's
	// Idempotency-Key template changed on this object. True (reason
	// IdempotencyKeyChanged) until the dedup retention has passed since the
	// change: redeliveries of events sent under the previous template look
	// new to the provider. Then False (reason IdempotencyKeySettled): every
	// such event is outside the dedup window. Its message names both
	// templates; it never changes Ready.
	ConditionIdempotencyKeyChanged = "IdempotencyKeyChanged"
	// ReasonIdempotencyKeyChanged is its True reason, and the Warning Event's.
	ReasonIdempotencyKeyChanged = "IdempotencyKeyChanged"
	// ReasonIdempotencyKeySettled is its False reason, and the Normal Event's.
	ReasonIdempotencyKeySettled = "IdempotencyKeySettled"
)

// Condition reasons. Each failure has its own, so alerts and kubectl output
// can tell them apart.
const (
	// DatabaseDurable reasons; the False ones are dedup.RiskSynchronousCommitOff
	// and dedup.RiskAsyncStandby.
	ReasonDurable           = "Durable"
	ReasonDurabilityUnknown = "DurabilityUnknown"

	ReasonReady     = "Ready"
	ReasonSuspended = "Suspended"
	ReasonDeleting  = "Deleting"

	// DatabaseReady.
	ReasonDatabaseReady        = "TableReady"
	ReasonSecretNotFound       = "SecretNotFound"
	ReasonSecretKeyMissing     = "SecretKeyMissing"
	ReasonInvalidURL           = "InvalidDatabaseURL"
	ReasonInvalidDatabaseCA    = "InvalidDatabaseCA"
	ReasonCertificateRejected  = "DatabaseCertificateRejected"
	ReasonDatabaseUnreachable  = "DatabaseUnreachable"
	ReasonAuthenticationFailed = "AuthenticationFailed"
	ReasonDatabaseNotFound     = "DatabaseNotFound"
	ReasonPermissionDenied     = "PermissionDenied"
	ReasonTableNotOwned        = "TableNotOwned"
	ReasonTableClaimed         = "TableClaimedByAnotherObject"
	ReasonInvalidSpec          = "InvalidSpec"
	ReasonTableLayoutMismatch  = "TableLayoutMismatch"
	ReasonLockNotAvailable     = "LockNotAvailable"
	ReasonDatabaseError        = "DatabaseError"
	// ReasonDatabaseTLSFailed: the TLS handshake with the database failed
	// (the server refused TLS, or spoke something else); the details are
	// in the operator's log only.
	ReasonDatabaseTLSFailed = "DatabaseTLSFailed"
	// ReasonDatabaseHostNotAllowed: the database URL names a host that the
	// manager's --database-host-allowlist does not list; the operator did
	// not connect.
	ReasonDatabaseHostNotAllowed = "DatabaseHostNotAllowed"
	// ReasonTransactionPooler: spec.database.urlSecretRef reaches PostgreSQL
	// through a pooler in transaction mode, which does not keep the session
	// the operator's table maintenance needs; nothing was changed.
	ReasonTransactionPooler = "DatabaseBehindTransactionPooler"
	// ReasonConsumerGroupInUse: another object registered the same consumer
	// group on the shared table.
	ReasonConsumerGroupInUse = "ConsumerGroupInUse"
	// ReasonApplicationSecretConflict: a Secret named <name>-app exists
	// and is not controlled by this object.
	ReasonApplicationSecretConflict = "ApplicationSecretNotOwned"

	// PartitionsReady.
	ReasonPartitionsReady    = "PartitionsReady"
	ReasonMaintenanceFailed  = "MaintenanceFailed"
	ReasonPartitionsMissing  = "PartitionsMissing"
	ReasonWaitingForDatabase = "WaitingForDatabase"

	// ConsumerReady.
	ReasonDeploymentAvailable   = "DeploymentAvailable"
	ReasonDeploymentProgressing = "DeploymentProgressing"
	ReasonDeploymentFailed      = "DeploymentFailed"
	ReasonScaledToZero          = "ScaledToZero"
	ReasonDeploymentConflict    = "DeploymentNotOwned"

	// Reconciling.
	ReasonProgressing = "Progressing"
	ReasonRetrying    = "Retrying"

	// KafkaReady (and BrokerUnreachable to InvalidKafkaCredentials below).
	ReasonTopicsFound             = "TopicsFound"
	ReasonDeadLetterTopicNotFound = "DeadLetterTopicNotFound"

	// TopicRetentionCovered and ReplicasWithinPartitions.
	ReasonRetentionCovered          = "DedupRetentionCoversTopic"
	ReasonRetentionShorterThanTopic = "DedupRetentionShorterThanTopic"
	ReasonRetentionShorterThanDLQ   = "DedupRetentionShorterThanDeadLetterTopic"
	ReasonReplicasWithinPartitions  = "ReplicasWithinPartitions"
	ReasonReplicasExceedPartitions  = "ReplicasExceedPartitions"
	ReasonBrokerUnreachable         = "BrokerUnreachable"
	ReasonKafkaAuthFailed           = "KafkaAuthenticationFailed"
	ReasonKafkaTLSFailed            = "KafkaTLSFailed"
	ReasonTopicNotFound             = "TopicNotFound"
	ReasonTopicAccessDenied         = "TopicAccessDenied"
	ReasonTopicRetentionUnknown     = "TopicRetentionUnknown"
	ReasonInvalidKafkaCredentials   = "InvalidKafkaCredentials"

	// AutoscalingReady.
	ReasonScaledObjectApplied  = "ScaledObjectApplied"
	ReasonScaledObjectNotReady = "ScaledObjectNotReady"
	ReasonKEDANotInstalled     = "KEDANotInstalled"
	ReasonScaledObjectConflict = "ScaledObjectNotOwned"

	// DatabaseRoles (also SecretNotFound, SecretKeyMissing for its URL)
	ReasonSeparateRoles            = "SeparateRoles"
	ReasonSingleRole               = "SingleRole"
	ReasonConsumerRoleUnrestricted = "ConsumerRoleUnrestricted"
	ReasonInvalidConsumerURL       = "InvalidConsumerDatabaseURL"
	ReasonConsumerRoleNotFound     = "ConsumerRoleNotFound"
	ReasonGrantFailed              = "GrantFailed"
)

// Defaults, mirrored by the CRD's default markers; the getters below apply
// them when a client bypassed defaulting (a unit test, an old object).
const (
	DefaultSchema         = "public"
	DefaultTable          = "processed_event"
	DefaultRetention      = 7 * 24 * time.Hour
	DefaultRetentionGrace = time.Hour
	DefaultPremake        = 4
	DefaultBatchMessages  = 500
	DefaultBatchMaxWait   = 200 * time.Millisecond
	DefaultHTTPTimeout    = 10 * time.Second
	DefaultDeadLetterSufx = ".dlq"
	DefaultMinReplicas    = 1
	DefaultLagThreshold   = 1000
)

// SetCondition sets one condition, with the object's generation as its
// observedGeneration; the transition time changes only when the status does.
//
// It reports whether the reason changed: the object had no condition of that
// type, or one with another reason. (Compare with this, not with what
// GetCondition returned before: that points at the condition this updates.)
func (c *IdempotentConsumer) SetCondition(condType string, status metav1.ConditionStatus, reason, message string) (reasonChanged bool) {
	prev := meta.FindStatusCondition(c.Status.Conditions, condType)
	reasonChanged = prev == nil || prev.Reason != reason
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: c.Generation,
	})
	return reasonChanged
}

// GetCondition returns the condition of that type, or nil.
func (c *IdempotentConsumer) GetCondition(condType string) *metav1.Condition {
	return meta.FindStatusCondition(c.Status.Conditions, condType)
}

// IsReady reports whether Ready is True for the current generation.
func (c *IdempotentConsumer) IsReady() bool {
	cond := c.GetCondition(ConditionReady)
	return cond != nil && cond.Status == metav1.ConditionTrue &&
		cond.ObservedGeneration == c.Generation && c.Status.ObservedGeneration == c.Generation
}

// SchemaName is spec.database.schema or its default.
func (c *IdempotentConsumer) SchemaName() string {
	if c.Spec.Database.Schema == "" {
		return DefaultSchema
	}
	return c.Spec.Database.Schema
}

// TableName is spec.database.table or its default.
func (c *IdempotentConsumer) TableName() string {
	if c.Spec.Database.Table == "" {
		return DefaultTable
	}
	return c.Spec.Database.Table
}

// Scope is spec.dedup.scope or its default.
func (c *IdempotentConsumer) Scope() DedupScope {
	if c.Spec.Dedup.Scope == "" {
		return ScopeConsumerGroup
	}
	return c.Spec.Dedup.Scope
}

// Interval is spec.dedup.interval or its default.
func (c *IdempotentConsumer) Interval() PartitionInterval {
	if c.Spec.Dedup.Interval == "" {
		return IntervalDaily
	}
	return c.Spec.Dedup.Interval
}

// Retention is spec.dedup.retention or its default.
func (c *IdempotentConsumer) Retention() time.Duration {
	if c.Spec.Dedup.Retention == nil || c.Spec.Dedup.Retention.Duration <= 0 {
		return DefaultRetention
	}
	return c.Spec.Dedup.Retention.Duration
}

// RetentionDecreaseGrace is spec.dedup.retentionDecreaseGrace or its
// default. The CRD has no default for it on purpose: a defaulted "1h" reads
// back through typed clients as "1h0m0s", a spec change that GitOps tools
// report as drift.
func (c *IdempotentConsumer) RetentionDecreaseGrace() time.Duration {
	if c.Spec.Dedup.RetentionDecreaseGrace == nil || c.Spec.Dedup.RetentionDecreaseGrace.Duration <= 0 {
		return DefaultRetentionGrace
	}
	return c.Spec.Dedup.RetentionDecreaseGrace.Duration
}

// Premake is spec.dedup.premake or its default.
func (c *IdempotentConsumer) Premake() int {
	if c.Spec.Dedup.Premake <= 0 {
		return DefaultPremake
	}
	return int(c.Spec.Dedup.Premake)
}

// OutOfWindowPolicy is spec.dedup.outOfWindowPolicy or its default.
func (c *IdempotentConsumer) OutOfWindowPolicy() OutOfWindowPolicy {
	if c.Spec.Dedup.OutOfWindowPolicy == "" {
		return OutOfWindowDeadLetter
	}
	return c.Spec.Dedup.OutOfWindowPolicy
}

// DeadLetterTopic is spec.kafka.deadLetterTopic, or "<topic>.dlq".
func (c *IdempotentConsumer) DeadLetterTopic() string {
	if c.Spec.Kafka.DeadLetterTopic != "" {
		return c.Spec.Kafka.DeadLetterTopic
	}
	return c.Spec.Kafka.Topic + DefaultDeadLetterSufx
}

// DeletionPolicy is spec.deletionPolicy or its default.
func (c *IdempotentConsumer) DeletionPolicy() DeletionPolicy {
	if c.Spec.DeletionPolicy == "" {
		return DeletionRetain
	}
	return c.Spec.DeletionPolicy
}

// HasConsumer reports whether spec.consumer is set. Without it the object
// is table only: no Deployment. (A consumer section always has a sink
// type, which the schema requires.)
func (c *IdempotentConsumer) HasConsumer() bool {
	return c.Spec.Consumer.Sink.Type != ""
}

// Sharing is spec.dedup.sharing or its default.
func (c *IdempotentConsumer) Sharing() TableSharing {
	if c.Spec.Dedup.Sharing == "" {
		return SharingExclusive
	}
	return c.Spec.Dedup.Sharing
}

// ApplicationSecretName is the name of the Secret with what an
// application needs to use the table: "<name>-app".
func (c *IdempotentConsumer) ApplicationSecretName() string {
	return c.Name + "-app"
}

// Replicas is spec.consumer.replicas or its default (1).
func (c *IdempotentConsumer) Replicas() int32 {
	if c.Spec.Consumer.Replicas == nil {
		return 1
	}
	return *c.Spec.Consumer.Replicas
}

// Autoscaled reports whether spec.autoscaling asks for KEDA.
func (c *IdempotentConsumer) Autoscaled() bool {
	return c.Spec.Autoscaling != nil && c.Spec.Autoscaling.Enabled
}

// MinReplicasOrDefault is spec.autoscaling.minReplicas or its default (1).
func (a *AutoscalingSpec) MinReplicasOrDefault() int32 {
	if a.MinReplicas == nil {
		return DefaultMinReplicas
	}
	return *a.MinReplicas
}

// LagThresholdOrDefault is spec.autoscaling.lagThreshold or its default.
func (a *AutoscalingSpec) LagThresholdOrDefault() int64 {
	if a.LagThreshold == nil || *a.LagThreshold <= 0 {
		return DefaultLagThreshold
	}
	return *a.LagThreshold
}

// BatchMaxMessages is spec.consumer.batch.maxMessages or its default.
func (c *IdempotentConsumer) BatchMaxMessages() int32 {
	if c.Spec.Consumer.Batch.MaxMessages <= 0 {
		return DefaultBatchMessages
	}
	return c.Spec.Consumer.Batch.MaxMessages
}

// BatchMaxWait is spec.consumer.batch.maxWait or its default.
func (c *IdempotentConsumer) BatchMaxWait() time.Duration {
	if c.Spec.Consumer.Batch.MaxWait == nil || c.Spec.Consumer.Batch.MaxWait.Duration <= 0 {
		return DefaultBatchMaxWait
	}
	return c.Spec.Consumer.Batch.MaxWait.Duration
}

// Duration returns one partition interval's nominal length (a month counts as
// 31 days, the longest it can be).
func (iv PartitionInterval) Duration() time.Duration {
	switch iv {
	case IntervalHourly:
		return time.Hour
	case IntervalWeekly:
		return 7 * 24 * time.Hour
	case IntervalMonthly:
		return 31 * 24 * time.Hour
	default:
		return 24 * time.Hour
	}
}

// ConsumerDatabaseURLRef is the Secret key holding the URL the consumer
// connects with: spec.database.consumerURLSecretRef, or urlSecretRef (the
// table owner's) without it.
func (c *IdempotentConsumer) ConsumerDatabaseURLRef() SecretKeyRef {
	if ref := c.Spec.Database.ConsumerURLSecretRef; ref != nil {
		return *ref
	}
	return c.Spec.Database.URLSecretRef
}
