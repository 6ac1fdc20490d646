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

// The DeadLetterReplay kind: a selection of an IdempotentConsumer's dead
// letters, counted by a dry run and replayed through the consumer's own
// pipeline by a Job the operator runs. The wire contract with that Job
// (REPLAY_SPEC, the Result in the termination message) is
// consumer/replay; docs/dead-letters.md describes selection and outcomes.

// ReplayMode says whether a replay changes anything.
// +kubebuilder:validation:Enum=DryRun;Apply
type ReplayMode string

const (
	// ReplayDryRun reads and counts the selection; nothing is called,
	// recorded or written.
	ReplayDryRun ReplayMode = "DryRun"
	// ReplayApply replays the selection through the live pipeline.
	ReplayApply ReplayMode = "Apply"
)

// DeadLetterReason is the reason a dead letter was written (its dlq-reason
// header), consumer/event's reasons and parked.
// +kubebuilder:validation:Enum=not_json;missing_id;invalid_uuid;wrong_uuid_version;oversized;outside_window;handler_failed;parked
type DeadLetterReason string

const (
	// DeadLetterNotJSON: a JSON envelope was expected and the value is not a JSON object.
	DeadLetterNotJSON DeadLetterReason = "not_json"
	// DeadLetterMissingID: no id field or ce_id header, or it is empty.
	DeadLetterMissingID DeadLetterReason = "missing_id"
	// DeadLetterInvalidUUID: the id is not a UUID in canonical text form.
	DeadLetterInvalidUUID DeadLetterReason = "invalid_uuid"
	// DeadLetterWrongUUIDVersion: a UUID, but not version 7.
	DeadLetterWrongUUIDVersion DeadLetterReason = "wrong_uuid_version"
	// DeadLetterOversized: the value is larger than the consumer accepts.
	DeadLetterOversized DeadLetterReason = "oversized"
	// DeadLetterOutsideWindow: the id was outside the dedup window.
	DeadLetterOutsideWindow DeadLetterReason = "outside_window"
	// DeadLetterHandlerFailed: the sink or handler failed on every attempt.
	DeadLetterHandlerFailed DeadLetterReason = "handler_failed"
	// DeadLetterParked: the record failed again on its last allowed replay.
	// Selections leave it out unless they name it.
	DeadLetterParked DeadLetterReason = "parked"
)

// ReplayPhase is where a DeadLetterReplay is in its lifecycle.
// +kubebuilder:validation:Enum=Pending;DryRunning;DryRunComplete;Applying;Succeeded;Failed;Refused
type ReplayPhase string

const (
	// ReplayPending: no Job has been created yet.
	ReplayPending ReplayPhase = "Pending"
	// ReplayDryRunning: the dry run's Job runs.
	ReplayDryRunning ReplayPhase = "DryRunning"
	// ReplayDryRunComplete: the dry run counted the selection (status.counts,
	// status.byReason); set spec.mode to Apply to replay it.
	ReplayDryRunComplete ReplayPhase = "DryRunComplete"
	// ReplayApplying: the apply's Job runs.
	ReplayApplying ReplayPhase = "Applying"
	// ReplaySucceeded: the apply processed the whole selection.
	ReplaySucceeded ReplayPhase = "Succeeded"
	// ReplayFailed: the Job failed (its retries used up) or reported an
	// incomplete run; the conditions say why.
	ReplayFailed ReplayPhase = "Failed"
	// ReplayRefused: the operator runs no Job for this object (no such
	// IdempotentConsumer, a table-only one, an image that cannot replay).
	ReplayRefused ReplayPhase = "Refused"
)

// AnnotationReplayCapable on an IdempotentConsumer with a custom
// spec.consumer.image says, with the value "true", that the image runs the
// runtime library's replay subcommand (consumer/replay.Subcommand, with
// REPLAY_SPEC) like the ready-made consumer does; without it the operator
// refuses to replay that consumer's dead letters.
const AnnotationReplayCapable = "kafka.idempotency.dev/replay-capable"

// ConsumerReference names an IdempotentConsumer in the same namespace.
type ConsumerReference struct {
	// name of the IdempotentConsumer.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// ReplayPartitionRange selects original offsets fromOffset <= offset <=
// toOffset of one original partition; an absent bound is open.
// +kubebuilder:validation:XValidation:rule="!has(self.fromOffset) || !has(self.toOffset) || self.fromOffset <= self.toOffset",message="fromOffset must not be greater than toOffset"
type ReplayPartitionRange struct {
	// partition of the original topic (dlq-original-partition).
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Partition int32 `json:"partition"`

	// fromOffset is the first original offset selected.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FromOffset *int64 `json:"fromOffset,omitempty"`

	// toOffset is the last original offset selected (inclusive).
	// +optional
	// +kubebuilder:validation:Minimum=0
	ToOffset *int64 `json:"toOffset,omitempty"`
}

// ReplaySelection picks dead letters. Every criterion that is set must hold
// (they are ANDed); an empty selection picks every dead letter but the
// parked ones. Only dead letters written at or before status.cutoff are
// selected.
// +kubebuilder:validation:XValidation:rule="!has(self.deadLetteredAfter) || !has(self.deadLetteredBefore) || self.deadLetteredAfter < self.deadLetteredBefore",message="deadLetteredAfter must be before deadLetteredBefore"
type ReplaySelection struct {
	// reasons: the dead letter's reason (dlq-reason) is one of them. Empty:
	// every reason but parked.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Reasons []DeadLetterReason `json:"reasons,omitempty"`

	// deadLetteredAfter: the dead letter was written (dlq-time) at or after it.
	// +optional
	DeadLetteredAfter *metav1.Time `json:"deadLetteredAfter,omitempty"`

	// deadLetteredBefore: the dead letter was written before it.
	// +optional
	DeadLetteredBefore *metav1.Time `json:"deadLetteredBefore,omitempty"`

	// partitions: the dead letter's original partition is one of these, and
	// its original offset within that entry's range.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Partitions []ReplayPartitionRange `json:"partitions,omitempty"`

	// eventIds: the dead letter's event id (dlq-event-id) is one of them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=500
	// +kubebuilder:validation:items:MaxLength=36
	// +kubebuilder:validation:items:Pattern=`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`
	EventIDs []string `json:"eventIds,omitempty"`

	// key: the record's Kafka key equals it (as UTF-8 text).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Key *string `json:"key,omitempty"`

	// maxCount stops the selection after that many dead letters (0 or
	// absent: no limit).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000000
	MaxCount int64 `json:"maxCount,omitempty"`
}

// DeadLetterReplaySpec selects dead letters of an IdempotentConsumer and says
// whether to count them (DryRun) or replay them (Apply).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.mode) || oldSelf.mode != 'Apply' || self == oldSelf",message="the spec is immutable once mode is Apply: replaying again means a new DeadLetterReplay"
type DeadLetterReplaySpec struct {
	// consumerRef names the IdempotentConsumer, in this namespace, whose dead
	// letters are replayed: its image, Secrets, database role, sink and
	// settings run the replay. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="consumerRef is immutable"
	ConsumerRef ConsumerReference `json:"consumerRef"`

	// selection picks the dead letters. Immutable: the dry run counts this
	// selection and an Apply replays exactly it; to select differently,
	// create a new DeadLetterReplay.
	// +optional
	// +kubebuilder:default={}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="selection is immutable: the dry run counted this selection and switching to Apply replays exactly it; to select differently, create a new DeadLetterReplay"
	Selection ReplaySelection `json:"selection,omitzero"`

	// mode DryRun counts the selection and changes nothing; Apply replays
	// it. A DryRun may be switched to Apply once (the selection stays as
	// reviewed); after that the spec is immutable.
	// +optional
	// +kubebuilder:default=DryRun
	Mode ReplayMode `json:"mode,omitempty"`

	// ratePerSecond bounds the replayed records per second (0 or absent: no
	// limit).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	RatePerSecond int32 `json:"ratePerSecond,omitempty"`

	// maxReplays: a dead letter that fails again on a replay after being
	// replayed maxReplays-1 times before is parked (reason parked) instead
	// of being dead-lettered again.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxReplays int32 `json:"maxReplays,omitempty"`

	// replayOutsideWindow replays dead letters whose event id is outside the
	// dedup window without dedup protection (each may take effect again);
	// false skips them (counted as skipped).
	// +optional
	// +kubebuilder:default=false
	ReplayOutsideWindow bool `json:"replayOutsideWindow,omitempty"`
}

// ReplayCounts are a replay's outcomes. Once an apply is complete, selected
// = applied + duplicates + skipped + failedAgain + parked.
type ReplayCounts struct {
	// selected dead letters (a dry run counts only these).
	// +optional
	Selected int64 `json:"selected,omitempty"`
	// applied: replayed and taken effect.
	// +optional
	Applied int64 `json:"applied,omitempty"`
	// duplicates: already applied before (by the live consumer or an
	// earlier replay); nothing done.
	// +optional
	Duplicates int64 `json:"duplicates,omitempty"`
	// skipped: outside the dedup window and not replayed
	// (spec.replayOutsideWindow is false).
	// +optional
	Skipped int64 `json:"skipped,omitempty"`
	// failedAgain: failed again and written back to the dead-letter topic
	// with its replay count.
	// +optional
	FailedAgain int64 `json:"failedAgain,omitempty"`
	// parked: failed again on the last allowed replay, written back with
	// reason parked.
	// +optional
	Parked int64 `json:"parked,omitempty"`
}

// DeadLetterReplaysStatus is what the DeadLetterReplay objects of an
// IdempotentConsumer did with its dead letters. The dead-letter topic never
// shrinks, so its size says nothing of what is left: these counts, and the
// consumer's idempotent_consumer_dead_lettered_total by reason, do.
type DeadLetterReplaysStatus struct {
	// replays is the number of DeadLetterReplay objects naming this
	// consumer, in any phase.
	Replays int32 `json:"replays"`
	// active is how many of them are running (Pending, DryRunning or
	// Applying).
	// +optional
	Active int32 `json:"active,omitempty"`
	// applied sums the counts of the replays in Apply mode (a dry run
	// changes nothing and is left out): replayed and taken effect,
	// duplicates, skipped, failed again (back in the dead-letter topic) and
	// parked.
	// +optional
	Applied ReplayCounts `json:"applied,omitzero"`
	// lastReplay is the replay that started most recently, and lastPhase
	// its phase.
	// +optional
	LastReplay string `json:"lastReplay,omitempty"`
	// +optional
	LastPhase ReplayPhase `json:"lastPhase,omitempty"`
}

// DeadLetterReplayStatus is the observed state of a DeadLetterReplay.
type DeadLetterReplayStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase: Pending, DryRunning, DryRunComplete, Applying, Succeeded,
	// Failed or Refused.
	// +optional
	Phase ReplayPhase `json:"phase,omitempty"`

	// counts of the latest Job: the dry run's until the apply starts, the
	// apply's after (durable: a resumed Job reports the whole run's).
	// +optional
	Counts ReplayCounts `json:"counts,omitzero"`

	// byReason counts the dry run's selected dead letters by reason.
	// +optional
	ByReason map[string]int64 `json:"byReason,omitempty"`

	// cutoff: only dead letters written at or before it are selected. Set
	// once, when the object's first Job is created, and never changed, so
	// what the dry run counted is what the apply replays.
	// +optional
	Cutoff *metav1.Time `json:"cutoff,omitempty"`

	// replayID names the replay's progress in the database and is written
	// into the dlq-replay-id header of dead letters it writes back: the
	// object's UID.
	// +optional
	ReplayID string `json:"replayID,omitempty"`

	// jobName is the latest Job's name.
	// +optional
	JobName string `json:"jobName,omitempty"`

	// startTime is when the latest Job was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the latest Job finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// conditions: Ready (True once the dry run or the apply completed),
	// Reconciling (True while a Job runs), Stalled (True when refused or
	// failed).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dlr,categories=kafka
// +kubebuilder:printcolumn:name="Consumer",type=string,JSONPath=`.spec.consumerRef.name`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.counts.selected`
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.counts.applied`
// +kubebuilder:printcolumn:name="Parked",type=integer,JSONPath=`.status.counts.parked`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 56",message="metadata.name must be at most 56 characters: it names the replay's Jobs (name-dryrun, name-apply), whose pods carry it in a label"

// DeadLetterReplay replays dead letters of an IdempotentConsumer through
// the consumer's own pipeline (decode, dedup claim, sink), in a Job the
// operator runs from the consumer's image and settings. It starts as a dry
// run that counts the selection; switching spec.mode to Apply replays it.
type DeadLetterReplay struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired state.
	// +required
	Spec DeadLetterReplaySpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status DeadLetterReplayStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// DeadLetterReplayList is a list of DeadLetterReplays.
type DeadLetterReplayList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []DeadLetterReplay `json:"items"`
}
