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
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// reconcilePartitions premakes and drops partitions, reports the window,
// and schedules the next run for the next partition boundary (or expiry)
// minus the lead time.
//
// Maintenance plans as of now+lead with retention+lead: a partition is
// created lead before its predecessor's interval starts being current, while
// a partition is still dropped only once its whole range is older than
// now-retention. So waking up at "boundary minus lead" always has work to do
// and the retention promise is never cut short.
func (r *IdempotentConsumerReconciler) reconcilePartitions(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	if !s.databaseOK {
		obj.SetCondition(kafkav1alpha1.ConditionPartitionsReady, metav1.ConditionFalse,
			kafkav1alpha1.ReasonWaitingForDatabase, "Waiting for the database to be ready")
		return nil
	}
	iv := dedup.Interval(obj.Interval())
	premake, retention := maintenancePolicy(s) // a shared table's: the longest retention and largest premake registered
	if err := dedup.ValidatePolicy(iv, premake, retention); err != nil {
		r.partitionsNotReady(ctx, s, kafkav1alpha1.ReasonInvalidSpec, err.Error(), false)
		return nil
	}
	lead := r.Options.MaintenanceLead
	target := retention
	retention = r.retentionToDropBy(ctx, s, target)
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()

	start := time.Now()
	res, err := s.store.Maintain(dctx, s.now.Add(lead), premake, retention+lead)
	observeMaintenance(time.Since(start), err, len(res.Created), len(res.Dropped))
	r.reportPartitionChanges(ctx, s, res)
	if err != nil {
		reason, transient := classifyDatabaseError(err)
		if reason == kafkav1alpha1.ReasonDatabaseError {
			reason = kafkav1alpha1.ReasonMaintenanceFailed
		}
		logDatabaseDetail(ctx, s, reason, err)
		r.partitionsNotReady(ctx, s, reason, "Partition maintenance failed: "+describeDatabaseError(reason, err), transient)
		return nil
	}
	// Maintain reports the partitions as they are after its run; read the
	// catalog again only if that final read of the engine's came back empty.
	state := dedup.State{Exists: true, Partitions: res.Partitions, Window: res.Window, Foreign: res.Foreign}
	if len(res.Partitions) == 0 {
		if state, err = s.store.Observe(dctx); err != nil {
			reason, transient := classifyDatabaseError(err)
			logDatabaseDetail(ctx, s, reason, err)
			r.partitionsNotReady(ctx, s, reason, "Reading the partitions failed: "+describeDatabaseError(reason, err), transient)
			return nil
		}
	}

	ours := ownPartitions(state, obj.TableName(), iv)
	r.recordPartitions(s, state, ours)
	recordPendingDecrease(obj, ours, retention, target)

	prevNext := obj.Status.NextMaintenanceTime
	next := nextMaintenance(s.now, iv, lead, retention, ours)
	onSchedule := prevNext != nil && !s.now.Before(prevNext.Time)
	if obj.Status.LastMaintenanceTime == nil || onSchedule || len(res.Created) > 0 || len(res.Dropped) > 0 {
		t := metav1.NewTime(s.now.UTC().Truncate(time.Second))
		obj.Status.LastMaintenanceTime = &t
	}
	nt := metav1.NewTime(next.UTC())
	obj.Status.NextMaintenanceTime = &nt
	s.requeue(min(next.Sub(s.now), r.Options.MaxRequeue))

	// Ready when the current slot and the premade ones are covered.
	horizon := s.now
	for range premake {
		horizon = iv.Next(iv.Floor(horizon))
	}
	if !state.Window.Contains(s.now) || !state.Window.Contains(horizon) || len(state.Foreign) > 0 && !covered(ours, s.now, horizon) {
		msg := fmt.Sprintf("The partitions cover %s but must cover now (%s) and %d intervals ahead", state.Window, s.now.UTC().Format(time.RFC3339), premake)
		if len(state.Foreign) > 0 {
			msg += fmt.Sprintf("; foreign partitions block the plan: %s", strings.Join(truncateList(state.Foreign, 5), ", "))
		}
		r.partitionsNotReady(ctx, s, kafkav1alpha1.ReasonPartitionsMissing, msg, false)
		return nil
	}
	s.partitionsOK = true
	msg := fmt.Sprintf("%d partitions cover %s; next maintenance at %s", len(state.Partitions), state.Window, next.UTC().Format(time.RFC3339))
	if len(state.Foreign) > 0 {
		msg += fmt.Sprintf("; foreign partitions left alone: %s", strings.Join(truncateList(state.Foreign, 5), ", "))
	}
	obj.SetCondition(kafkav1alpha1.ConditionPartitionsReady, metav1.ConditionTrue, kafkav1alpha1.ReasonPartitionsReady, msg)
	return nil
}

// retentionToDropBy is the retention expired partitions are dropped by
// this run: target (the spec's, or a shared table's longest registered),
// except while a decrease of it waits out spec.dedup.retentionDecreaseGrace,
// when it is the retention before the decrease. status.retention remembers
// the retention applied and the pending decrease; an increase applies at
// once and takes a pending decrease back.
//
// The grace is keyed on the decrease: it starts when a lower retention is
// first seen, and again when it changes to another lower value. An object
// whose status has no retention yet (a new one, or one written by a build
// without this) applies target at once: there was nothing to take back.
func (r *IdempotentConsumerReconciler) retentionToDropBy(ctx context.Context, s *reconcileState, target time.Duration) time.Duration {
	obj := s.obj
	st := obj.Status.Retention
	applied, err := time.Duration(0), error(nil)
	if st != nil {
		applied, err = time.ParseDuration(st.Applied)
	}
	if st == nil || err != nil || applied <= 0 {
		obj.Status.Retention = &kafkav1alpha1.RetentionStatus{Applied: target.String()}
		return target
	}
	pd := st.PendingDecrease
	if target >= applied {
		if pd != nil {
			msg := fmt.Sprintf("spec.dedup.retention is %s again (it was lowered to %s at %s): every partition is kept", target, pd.Retention, pd.DetectedTime.UTC().Format(time.RFC3339))
			r.event(obj, corev1.EventTypeNormal, ReasonRetentionDecreaseCancelled, actionMaintainPartitions, msg)
			log.FromContext(ctx).Info("Retention decrease taken back", "retention", target, "lowered", pd.Retention)
		}
		obj.Status.Retention = &kafkav1alpha1.RetentionStatus{Applied: target.String()}
		return target
	}
	started := pd == nil || pd.Retention != target.String()
	if started {
		pd = &kafkav1alpha1.RetentionDecrease{Retention: target.String(), DetectedTime: metav1.NewTime(s.now.UTC().Truncate(time.Second))}
	}
	// The grace is read on every run, so changing it applies to a pending
	// decrease too.
	pd.DropTime = metav1.NewTime(pd.DetectedTime.Add(obj.RetentionDecreaseGrace()))
	if !s.now.Before(pd.DropTime.Time) {
		msg := fmt.Sprintf("spec.dedup.retention was lowered from %s to %s at %s and its grace period has passed: partitions are dropped by %s now",
			applied, target, pd.DetectedTime.UTC().Format(time.RFC3339), target)
		r.event(obj, corev1.EventTypeNormal, ReasonRetentionDecreaseApplied, actionMaintainPartitions, msg)
		log.FromContext(ctx).Info("Retention decrease applied", "retention", target, "previous", applied)
		obj.Status.Retention = &kafkav1alpha1.RetentionStatus{Applied: target.String()}
		return target
	}
	st.PendingDecrease = pd
	if started {
		msg := fmt.Sprintf("spec.dedup.retention was lowered from %s to %s: the partitions only the decrease makes expired are dropped at %s (spec.dedup.retentionDecreaseGrace %s), and the event ids in them forgotten. Set it back to %s before then to keep every partition; status.retention.pendingDecrease lists them",
			applied, target, pd.DropTime.UTC().Format(time.RFC3339), obj.RetentionDecreaseGrace(), applied)
		r.event(obj, corev1.EventTypeWarning, ReasonRetentionDecreasePending, actionMaintainPartitions, msg)
		log.FromContext(ctx).Info("Retention decrease pending", "retention", target, "applied", applied, "dropTime", pd.DropTime.Time)
	}
	s.requeue(pd.DropTime.Sub(s.now))
	return applied
}

// maxPendingPartitions caps the partition names a pending decrease lists.
const maxPendingPartitions = 10

// recordPendingDecrease fills in what a pending decrease will drop at its
// drop time: our partitions that end retention-target before it or earlier
// (expired under target) and that the applied retention keeps until then.
func recordPendingDecrease(obj *kafkav1alpha1.IdempotentConsumer, ours []dedup.Partition, applied, target time.Duration) {
	if obj.Status.Retention == nil || obj.Status.Retention.PendingDecrease == nil {
		return
	}
	pd := obj.Status.Retention.PendingDecrease
	at := pd.DropTime.Time
	pd.PartitionCount, pd.Partitions, pd.ForgetBefore = 0, nil, nil
	for _, p := range ours {
		if p.To.After(at.Add(-target)) || !p.To.After(at.Add(-applied)) {
			continue
		}
		pd.PartitionCount++
		if len(pd.Partitions) < maxPendingPartitions {
			pd.Partitions = append(pd.Partitions, p.Name)
		}
		t := metav1.NewTime(p.To.UTC())
		pd.ForgetBefore = &t
	}
	what := "no partition yet (more expire under it as time passes)"
	if pd.ForgetBefore != nil {
		what = fmt.Sprintf("%d partition(s), the event ids from before %s", pd.PartitionCount, pd.ForgetBefore.UTC().Format(time.RFC3339))
	}
	pd.Message = fmt.Sprintf("spec.dedup.retention was lowered from %s to %s at %s: at %s it drops %s. Set spec.dedup.retention back to %s before then to keep every partition",
		applied, target, pd.DetectedTime.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339), what, applied)
}

// recordPartitions writes the window and partition summary into status.
func (r *IdempotentConsumerReconciler) recordPartitions(s *reconcileState, state dedup.State, ours []dedup.Partition) {
	obj := s.obj
	if state.Window.IsZero() {
		obj.Status.Window = nil
	} else {
		obj.Status.Window = &kafkav1alpha1.DedupWindow{
			From:    metav1.NewTime(state.Window.From.UTC()),
			To:      metav1.NewTime(state.Window.To.UTC()),
			Summary: state.Window.From.UTC().Format(windowLayout) + "/" + state.Window.To.UTC().Format(windowLayout),
		}
	}
	ps := &kafkav1alpha1.PartitionsStatus{Count: int32(len(state.Partitions))} //nolint:gosec // G115: PostgreSQL allows far fewer partitions
	if n := len(state.Partitions); n > 0 {
		ps.Oldest, ps.Newest = state.Partitions[0].Name, state.Partitions[n-1].Name
	}
	for _, p := range ours {
		if !p.From.Before(s.now) {
			ps.Ahead++
		}
	}
	obj.Status.Partitions = ps
}

const windowLayout = "2006-01-02T15:04Z"

// ownPartitions are the attached partitions that are ours, oldest first.
func ownPartitions(state dedup.State, table string, iv dedup.Interval) []dedup.Partition {
	var out []dedup.Partition
	for _, p := range state.Partitions {
		if p.DetachPending {
			continue
		}
		from, to, ok := p.TimeRange()
		if !ok {
			continue
		}
		if start, ok := dedup.ParsePartitionName(table, iv, p.Name); !ok || !start.Equal(from) {
			continue
		}
		out = append(out, dedup.Partition{Name: p.Name, From: from, To: to})
	}
	return out
}

// covered reports whether our partitions cover [from, to] without a gap.
func covered(ours []dedup.Partition, from, to time.Time) bool {
	t := from
	for _, p := range ours {
		if p.From.After(t) {
			break
		}
		if p.To.After(t) {
			t = p.To
		}
		if t.After(to) {
			return true
		}
	}
	return t.After(to)
}

// nextMaintenance is when the plan next changes, seen from a maintainer
// that plans as of now+lead with retention+lead: the next interval boundary
// minus lead (a new partition is due), or the moment the oldest of our
// partitions expires (its end plus retention), whichever comes first.
func nextMaintenance(now time.Time, iv dedup.Interval, lead, retention time.Duration, ours []dedup.Partition) time.Time {
	next := iv.Next(iv.Floor(now.Add(lead).UTC())).Add(-lead)
	for _, p := range ours {
		if expiry := p.To.Add(retention); expiry.After(now) && expiry.Before(next) {
			next = expiry
		}
	}
	return next
}

// reportPartitionChanges emits one Event per kind of change (not one per
// partition) and logs the names.
func (r *IdempotentConsumerReconciler) reportPartitionChanges(ctx context.Context, s *reconcileState, res dedup.Result) {
	logger := log.FromContext(ctx)
	if n := len(res.Created); n > 0 {
		names := partitionNames(res.Created)
		r.event(s.obj, corev1.EventTypeNormal, ReasonPartitionsCreated, actionMaintainPartitions,
			fmt.Sprintf("Created %d partition(s): %s", n, strings.Join(truncateList(names, 6), ", ")))
		logger.Info("Created partitions", "count", n, "partitions", names)
	}
	if n := len(res.Dropped); n > 0 {
		names := partitionNames(res.Dropped)
		r.event(s.obj, corev1.EventTypeNormal, ReasonPartitionsDropped, actionMaintainPartitions,
			fmt.Sprintf("Dropped %d expired partition(s): %s", n, strings.Join(truncateList(names, 6), ", ")))
		logger.Info("Dropped expired partitions", "count", n, "partitions", names)
	}
	if len(res.Finalized) > 0 {
		logger.Info("Completed interrupted partition detaches", "partitions", res.Finalized)
	}
}

func partitionNames(ps []dedup.Partition) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// truncateList keeps the first n items and says how many were left out.
func truncateList(items []string, n int) []string {
	if len(items) <= n {
		return items
	}
	out := append([]string(nil), items[:n]...)
	return append(out, fmt.Sprintf("and %d more", len(items)-n))
}
