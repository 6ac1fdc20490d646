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

// Outbox conditions and reasons. Ready, DatabaseReady, PartitionsReady and
// KafkaReady, and their reasons, are the IdempotentConsumer's (a missing
// topic is TopicNotFound, brokers that cannot be reached
// BrokerUnreachable, a database problem the same reasons as a dedup
// table's).
const (
	// ConditionRelayReady: the relay Deployment has an available replica
	// (or spec.relay.replicas is 0).
	ConditionRelayReady = "RelayReady"
	// ConditionConsumerRetentionCovered (a warning, not part of Ready):
	// every IdempotentConsumer of this namespace reading one of the
	// outbox's topics remembers event ids at least the outbox's retention
	// plus the topic's. An event can be published late (up to the outbox
	// retention after its id's time, by a relay that was down or reset)
	// and then stays in the topic for the topic's retention: a consumer
	// that forgot the id by then would apply a redelivery again.
	ConditionConsumerRetentionCovered = "ConsumerRetentionCovered"
	// An Outbox's DatabaseDurable (a warning, not part of Ready; the
	// IdempotentConsumer's condition type and reasons): False
	// (AsynchronousStandby) when a standby replicates asynchronously, so a
	// failover can lose a transaction whose event the relay has published.

	// ReasonConsumerRetentionCovered: every such consumer's retention is
	// long enough.
	ReasonConsumerRetentionCovered = "ConsumerRetentionCovered"
	// ReasonConsumerRetentionShort: at least one is not (named in the
	// message, with the numbers).
	ReasonConsumerRetentionShort = "ConsumerRetentionTooShort"
	// ReasonNoConsumers: no IdempotentConsumer of this namespace reads the
	// outbox's topics.
	ReasonNoConsumers = "NoConsumersInNamespace"
	// ReasonRelayScaledToZero: spec.relay.replicas is 0: nothing publishes.
	ReasonRelayScaledToZero = "RelayScaledToZero"
)

// Defaults of the Outbox spec.
const (
	DefaultOutboxTable          = "outbox"
	DefaultOutboxRelayReplicas  = 2
	DefaultOutboxPublishTimeout = 5 * time.Second
	DefaultOutboxPollInterval   = time.Second
	DefaultOutboxBatchSize      = 500
	DefaultOutboxMaxMessage     = 1 << 20
)

// SchemaName is spec.database.schema or its default.
func (o *Outbox) SchemaName() string {
	if o.Spec.Database.Schema == "" {
		return DefaultSchema
	}
	return o.Spec.Database.Schema
}

// TableName is spec.database.table or its default.
func (o *Outbox) TableName() string {
	if o.Spec.Database.Table == "" {
		return DefaultOutboxTable
	}
	return o.Spec.Database.Table
}

// Interval is spec.partitioning.interval or its default.
func (o *Outbox) Interval() PartitionInterval {
	if o.Spec.Partitioning.Interval == "" {
		return IntervalDaily
	}
	return o.Spec.Partitioning.Interval
}

// Premake is spec.partitioning.premake or its default.
func (o *Outbox) Premake() int {
	if o.Spec.Partitioning.Premake <= 0 {
		return DefaultPremake
	}
	return int(o.Spec.Partitioning.Premake)
}

// Retention is spec.partitioning.retention or its default.
func (o *Outbox) Retention() time.Duration {
	if r := o.Spec.Partitioning.Retention; r != nil && r.Duration > 0 {
		return r.Duration
	}
	return DefaultRetention
}

// RelayReplicas is spec.relay.replicas or its default.
func (o *Outbox) RelayReplicas() int32 {
	if r := o.Spec.Relay.Replicas; r != nil {
		return *r
	}
	return DefaultOutboxRelayReplicas
}

// PublishTimeout is spec.relay.publishTimeout or its default.
func (o *Outbox) PublishTimeout() time.Duration {
	if d := o.Spec.Relay.PublishTimeout; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return DefaultOutboxPublishTimeout
}

// PollInterval is spec.relay.pollInterval or its default.
func (o *Outbox) PollInterval() time.Duration {
	if d := o.Spec.Relay.PollInterval; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return DefaultOutboxPollInterval
}

// BatchSize is spec.relay.batchSize or its default.
func (o *Outbox) BatchSize() int32 {
	if n := o.Spec.Relay.BatchSize; n != nil && *n > 0 {
		return *n
	}
	return DefaultOutboxBatchSize
}

// MaxMessageBytes is spec.relay.maxMessageBytes or its default.
func (o *Outbox) MaxMessageBytes() int32 {
	if n := o.Spec.Relay.MaxMessageBytes; n != nil && *n > 0 {
		return *n
	}
	return DefaultOutboxMaxMessage
}

// RelayDatabaseURLRef is the Secret key the relay pods read their database
// URL from: spec.database.relayURLSecretRef, else urlSecretRef.
func (o *Outbox) RelayDatabaseURLRef() SecretKeyRef {
	if r := o.Spec.Database.RelayURLSecretRef; r != nil {
		return *r
	}
	return o.Spec.Database.URLSecretRef
}

// SetCondition sets one condition with the object's generation as its
// observedGeneration, and reports whether its reason changed.
func (o *Outbox) SetCondition(condType string, status metav1.ConditionStatus, reason, message string) (reasonChanged bool) {
	prev := meta.FindStatusCondition(o.Status.Conditions, condType)
	reasonChanged = prev == nil || prev.Reason != reason || prev.Status != status
	meta.SetStatusCondition(&o.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: o.Generation,
	})
	return reasonChanged
}

// GetCondition returns the condition of that type, or nil.
func (o *Outbox) GetCondition(condType string) *metav1.Condition {
	return meta.FindStatusCondition(o.Status.Conditions, condType)
}
