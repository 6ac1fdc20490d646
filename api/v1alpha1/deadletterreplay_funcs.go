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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeadLetterReplay condition reasons. Its conditions are Ready, Reconciling
// and Stalled, read as kstatus reads them: Reconciling while a Job runs,
// Stalled when refused or failed, Ready True once the dry run or the apply
// completed.
const (
	// DeadLetterReplay: a Job runs (Ready False, Reconciling True).
	ReasonReplayPending = "Pending"
	ReasonDryRunning    = "DryRunning"
	ReasonApplying      = "Applying"
	// DeadLetterReplay: done (Ready True).
	ReasonDryRunComplete  = "DryRunComplete"
	ReasonReplaySucceeded = "Succeeded"
	// DeadLetterReplay: refused or failed (Ready False, Stalled True).
	ReasonConsumerNotFound  = "ConsumerNotFound"
	ReasonConsumerTableOnly = "ConsumerTableOnly"
	ReasonImageCannotReplay = "ImageCannotReplay"
	ReasonJobConflict       = "JobNotOwned"
	ReasonJobFailed         = "JobFailed"
	ReasonReplayIncomplete  = "ReplayIncomplete"
	ReasonResultMissing     = "ResultMissing"
)

// SetCondition sets one condition with the object's generation as its
// observedGeneration, and reports whether its reason changed.
func (r *DeadLetterReplay) SetCondition(condType string, status metav1.ConditionStatus, reason, message string) (reasonChanged bool) {
	prev := meta.FindStatusCondition(r.Status.Conditions, condType)
	reasonChanged = prev == nil || prev.Reason != reason
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: r.Generation,
	})
	return reasonChanged
}

// GetCondition returns the condition of that type, or nil.
func (r *DeadLetterReplay) GetCondition(condType string) *metav1.Condition {
	return meta.FindStatusCondition(r.Status.Conditions, condType)
}
