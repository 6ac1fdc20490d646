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
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// reconcileReplaySummary sets status.deadLetterReplays from the
// DeadLetterReplay objects (read from the manager's cache) that name this
// consumer. It runs whatever state the database and the brokers are in.
func (r *IdempotentConsumerReconciler) reconcileReplaySummary(ctx context.Context, s *reconcileState) error {
	var list kafkav1alpha1.DeadLetterReplayList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.obj.Namespace)); err != nil {
		return fmt.Errorf("listing DeadLetterReplays: %w", err)
	}
	s.obj.Status.DeadLetterReplays = summarizeReplays(s.obj.Name, list.Items)
	return nil
}

// summarizeReplays sums the replays of the consumer named consumer; nil
// when there are none.
func summarizeReplays(consumer string, replays []kafkav1alpha1.DeadLetterReplay) *kafkav1alpha1.DeadLetterReplaysStatus {
	var sum kafkav1alpha1.DeadLetterReplaysStatus
	var last *kafkav1alpha1.DeadLetterReplay
	for i := range replays {
		d := &replays[i]
		if d.Spec.ConsumerRef.Name != consumer {
			continue
		}
		sum.Replays++
		switch d.Status.Phase {
		case "", kafkav1alpha1.ReplayPending, kafkav1alpha1.ReplayDryRunning, kafkav1alpha1.ReplayApplying:
			sum.Active++
		}
		if d.Spec.Mode == kafkav1alpha1.ReplayApply {
			c, a := d.Status.Counts, &sum.Applied
			a.Selected += c.Selected
			a.Applied += c.Applied
			a.Duplicates += c.Duplicates
			a.Skipped += c.Skipped
			a.FailedAgain += c.FailedAgain
			a.Parked += c.Parked
		}
		if last == nil || startedAfter(d, last) {
			last = d
		}
	}
	if sum.Replays == 0 {
		return nil
	}
	sum.LastReplay, sum.LastPhase = last.Name, last.Status.Phase
	return &sum
}

// startedAfter orders replays by start time (not started yet: by creation),
// then by name.
func startedAfter(a, b *kafkav1alpha1.DeadLetterReplay) bool {
	at, bt := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if a.Status.StartTime != nil {
		at = a.Status.StartTime.Time
	}
	if b.Status.StartTime != nil {
		bt = b.Status.StartTime.Time
	}
	if !at.Equal(bt) {
		return at.After(bt)
	}
	return a.Name > b.Name
}

// consumerForReplay maps a DeadLetterReplay to the IdempotentConsumer it
// names, whose status sums its replays.
func consumerForReplay(_ context.Context, o client.Object) []reconcile.Request {
	d, ok := o.(*kafkav1alpha1.DeadLetterReplay)
	if !ok || d.Spec.ConsumerRef.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: d.Spec.ConsumerRef.Name}}}
}
