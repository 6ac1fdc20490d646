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
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// Every condition writer and every Event reason of the controller. The
// component conditions (DatabaseReady, PartitionsReady, ConsumerReady) go
// through notReady, the warnings (AutoscalingReady, the topic checks)
// through warningCondition or autoscalingNotReady; status.go derives Ready,
// Reconciling and Stalled from what they recorded. Condition reasons are
// the API's (api/v1alpha1); the reasons below are those of Events only.

// Reasons of Events that are not also a condition's reason.
const (
	// ReasonTableAdopted is the reason of the Normal Event recorded when an
	// object takes its table over from the previous owner named in
	// spec.database.adoptFromUID.
	ReasonTableAdopted = "TableAdopted"
	// ReasonTableKept is the reason of the Warning Event recorded when an
	// object with deletionPolicy Delete is deleted without its table being
	// dropped, because the database URL Secret (or its key) is gone.
	ReasonTableKept = "TableKept"
	// ReasonTableRetained: an object with deletionPolicy Retain was deleted
	// and its table left in place.
	ReasonTableRetained = "TableRetained"
	// ReasonTableDropped: an object with deletionPolicy Delete was deleted
	// and its table dropped.
	ReasonTableDropped = "TableDropped"
	// ReasonDeploymentCreated: the consumer Deployment was created.
	ReasonDeploymentCreated = "DeploymentCreated"
	// ReasonPartitionsCreated and ReasonPartitionsDropped: maintenance
	// created or dropped partitions (one Event per kind of change).
	ReasonPartitionsCreated = "PartitionsCreated"
	ReasonPartitionsDropped = "PartitionsDropped"
	// ReasonRetentionDecreasePending: the Warning Event when a lower
	// spec.dedup.retention is first seen; the partitions only it made
	// expired are kept for spec.dedup.retentionDecreaseGrace.
	ReasonRetentionDecreasePending = "RetentionDecreasePending"
	// ReasonRetentionDecreaseCancelled: the retention was raised back
	// within the grace; every partition is kept.
	ReasonRetentionDecreaseCancelled = "RetentionDecreaseCancelled"
	// ReasonRetentionDecreaseApplied: the grace passed; the lower retention
	// is applied and the partitions it expires are dropped.
	ReasonRetentionDecreaseApplied = "RetentionDecreaseApplied"
)

// ReasonPodSecurityRejected is the ConsumerReady reason when the API
// server's Pod Security admission refuses a pod built from the consumer
// Deployment's template (a spec.consumer.podTemplate override that breaks
// the namespace's enforced profile, for instance).
const ReasonPodSecurityRejected = "PodSecurityRejected"

// ReasonTopicLimitBelowRelay is the reason of the Warning Event about an
// Outbox one of whose topics takes smaller records (max.message.bytes) than
// its relay sends (spec.relay.maxMessageBytes): an event between the two
// passes the emit function's check and then holds the relay's stream.
const ReasonTopicLimitBelowRelay = "TopicLimitBelowRelay"

// Actions of Events: what the operator was doing.
const (
	actionConnectDatabase    = "ConnectDatabase"
	actionAdoptTable         = "AdoptTable"
	actionMaintainPartitions = "MaintainPartitions"
	actionApplyDeployment    = "ApplyDeployment"
	actionApplyScaledObject  = "ApplyScaledObject"
	actionInspectTopics      = "InspectTopics"
	actionDelete             = "Delete"
	actionCheckDurability    = "CheckDurability"
)

// event emits a Kubernetes Event (events.k8s.io/v1) about obj. Callers pass
// messages already scrubbed of secrets; the note is passed as an argument,
// never as a format string.
func (r *IdempotentConsumerReconciler) event(obj *kafkav1alpha1.IdempotentConsumer, eventType, reason, action, note string) {
	if r.Recorder == nil {
		return
	}
	const maxNote = 1024 // the API server refuses longer notes
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.Recorder.Eventf(obj, nil, eventType, reason, action, "%s", note)
}

// notReady sets condType False with the reason and a scrubbed message, asks
// for a retry (transient) or marks the object stalled, counts the problem,
// and emits one Warning Event and log line per change of reason, not per retry.
func (r *IdempotentConsumerReconciler) notReady(ctx context.Context, s *reconcileState, condType, action, logMsg, reason, message string, transient bool) {
	message = s.scrub(message)
	changed := s.obj.SetCondition(condType, metav1.ConditionFalse, reason, message)
	if transient {
		s.retry(reason, message)
	} else {
		s.stall(reason, message)
	}
	observeProblem(reason)
	if changed {
		r.event(s.obj, corev1.EventTypeWarning, reason, action, message)
		log.FromContext(ctx).Info(logMsg, "reason", reason, "message", message)
	}
}

// partitionsNotReady records a partition problem.
func (r *IdempotentConsumerReconciler) partitionsNotReady(ctx context.Context, s *reconcileState, reason, message string, transient bool) {
	r.notReady(ctx, s, kafkav1alpha1.ConditionPartitionsReady, actionMaintainPartitions, "Partitions not ready", reason, message, transient)
}

// databaseNotReady records a database problem; stalled problems need a
// change by someone, transient ones may pass on retry.
func (r *IdempotentConsumerReconciler) databaseNotReady(ctx context.Context, s *reconcileState, reason, message string, transient bool) {
	r.notReady(ctx, s, kafkav1alpha1.ConditionDatabaseReady, actionConnectDatabase, "Database not ready", reason, message, transient)
}

// consumerNotReady records a consumer problem.
func (r *IdempotentConsumerReconciler) consumerNotReady(ctx context.Context, s *reconcileState, reason, message string, transient bool) {
	r.notReady(ctx, s, kafkav1alpha1.ConditionConsumerReady, actionApplyDeployment, "Consumer not ready", reason, message, transient)
}

// autoscalingNotReady records an autoscaling problem. It is a warning: Ready
// does not depend on it, because the consumer runs either way.
func (r *IdempotentConsumerReconciler) autoscalingNotReady(ctx context.Context, s *reconcileState, reason, message string) {
	message = s.scrub(message)
	if s.obj.SetCondition(kafkav1alpha1.ConditionAutoscalingReady, metav1.ConditionFalse, reason, message) {
		r.event(s.obj, corev1.EventTypeWarning, reason, actionApplyScaledObject, message)
		log.FromContext(ctx).Info("Autoscaling not ready", "reason", reason, "message", message)
	}
}

// warningCondition sets a warning condition (one that never changes Ready)
// and, when it turns or stays not-True with a new reason, records a Warning
// Event for action and logs it. The message is scrubbed of secrets.
func (r *IdempotentConsumerReconciler) warningCondition(ctx context.Context, s *reconcileState, action, condType string, status metav1.ConditionStatus, reason, message string) {
	message = s.scrub(message)
	if changed := s.obj.SetCondition(condType, status, reason, message); status == metav1.ConditionTrue || !changed {
		return
	}
	r.event(s.obj, corev1.EventTypeWarning, reason, action, message)
	log.FromContext(ctx).Info("Warning condition", "condition", condType, "status", status, "reason", reason, "message", message)
}

// topicWarning sets a warning condition; a change to a new reason that is not
// True is a Warning Event and a log line, once.
func (r *IdempotentConsumerReconciler) topicWarning(ctx context.Context, s *reconcileState, condType string, status metav1.ConditionStatus, reason, message string) {
	if condType == kafkav1alpha1.ConditionReplicasWithinPartitions && !s.obj.HasConsumer() {
		return // table only: no replicas to compare
	}
	r.warningCondition(ctx, s, actionInspectTopics, condType, status, reason, message)
}

// topicsUnknown sets both warnings to Unknown with the reason.
func (r *IdempotentConsumerReconciler) topicsUnknown(ctx context.Context, s *reconcileState, reason, message string) {
	r.topicWarning(ctx, s, kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown, reason, message)
	r.topicWarning(ctx, s, kafkav1alpha1.ConditionReplicasWithinPartitions, metav1.ConditionUnknown, reason, message)
}

// kafkaNotReady sets KafkaReady False with the reason and, for an object
// with spec.consumer, reports the problem as transient, so Ready is False
// with that reason unless a problem found earlier (database, partitions)
// or one no retry can fix (Stalled) comes first. The consumer Deployment is
// still reconciled. A table-only object only reports it: its table serves a
// consumer the operator does not run, and needs no topic to be ready.
// One Warning Event per change of reason.
func (r *IdempotentConsumerReconciler) kafkaNotReady(ctx context.Context, s *reconcileState, reason, message string) {
	message = s.scrub(message)
	if s.obj.HasConsumer() {
		s.retry(reason, message)
		observeProblem(reason)
	}
	if s.obj.SetCondition(kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, reason, message) {
		r.event(s.obj, corev1.EventTypeWarning, reason, actionInspectTopics, message)
		log.FromContext(ctx).Info("Kafka not ready", "reason", reason, "message", message)
	}
}

// kafkaReady sets KafkaReady True.
func (r *IdempotentConsumerReconciler) kafkaReady(_ context.Context, s *reconcileState, message string) {
	s.obj.SetCondition(kafkav1alpha1.ConditionKafkaReady, metav1.ConditionTrue, kafkav1alpha1.ReasonTopicsFound, s.scrub(message))
}
