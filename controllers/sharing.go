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
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// Shared tables (spec.dedup.sharing: Shared): the table's ownership marker
// names the shared table (dedup.SharedOwner) instead of one object, every
// object using it registers in the table's registry with its consumer
// group, retention and premake, and each maintains the partitions with the
// longest retention and the largest premake registered. Deletion
// unregisters; the table is dropped only when the last user leaves with
// deletionPolicy Delete. consumer/dedup/registry.go holds the SQL.

// Reasons of the Events about shared tables.
const (
	// ReasonTableShared: an exclusive table of this object's became shared
	// (spec.dedup.sharing changed from Exclusive to Shared).
	ReasonTableShared = "TableShared"
	// ReasonTableReleased: a deleted object left a shared table that other
	// objects still use, or that it leaves in place (deletionPolicy Retain).
	ReasonTableReleased = "TableReleased"
)

const actionShareTable = "ShareTable"

// SharedTableStore is what a shared table needs beyond TableStore; a
// *dedup.Engine has it.
type SharedTableStore interface {
	// Register records a user of the shared table and returns them all.
	Register(ctx context.Context, u dedup.User) ([]dedup.User, error)
	// Leave unregisters a user and, if it was the last and drop is set,
	// drops the table.
	Leave(ctx context.Context, id string, drop bool) (dedup.LeaveResult, error)
}

// sharedTable reports whether obj uses its table together with others.
func sharedTable(obj *kafkav1alpha1.IdempotentConsumer) bool {
	return obj.Sharing() == kafkav1alpha1.SharingShared
}

// markerOwner is the owner the table's markers name for obj: its UID, or
// for a shared table the shared table's own name.
func markerOwner(obj *kafkav1alpha1.IdempotentConsumer) string {
	if sharedTable(obj) {
		return dedup.SharedOwner(tableOf(obj))
	}
	return string(obj.UID)
}

// ensureSharedTable is ensureTable for a shared table: EnsureTable with the
// shared owner, which creates the table shared or accepts it if it is. A
// table that this object created exclusive (its spec.dedup.sharing went from
// Exclusive to Shared) is converted: its markers are rewritten to name the
// shared table, in one transaction (the adoption's).
func (r *IdempotentConsumerReconciler) ensureSharedTable(ctx, dctx context.Context, s *reconcileState, store TableStore) error {
	obj := s.obj
	shared, uid := markerOwner(obj), string(obj.UID)
	err := store.EnsureTable(dctx, shared)
	var own *dedup.OwnershipError
	if !errors.As(err, &own) || own.Owner != uid {
		return err
	}
	res, err := store.Adopt(dctx, shared, uid)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("spec.dedup.sharing is Shared: table %s, which this object created, is now shared: its ownership marker and %d partition(s)' name the shared table, and other objects with sharing Shared and their own consumer group can use it",
		own.Table, len(res.Partitions))
	r.event(obj, corev1.EventTypeNormal, ReasonTableShared, actionShareTable, msg)
	log.FromContext(ctx).Info("Table is shared now", "table", own.Table, "partitions", len(res.Partitions))
	return nil
}

// sharedPolicy is the premake and retention a shared table is kept with.
type sharedPolicy struct {
	premake   int
	retention time.Duration
}

// maintenancePolicy is the premake and retention reconcilePartitions keeps
// the table with: the object's own, or a shared table's effective policy as
// registered this reconcile.
func maintenancePolicy(s *reconcileState) (int, time.Duration) {
	if s.shared != nil {
		return s.shared.premake, s.shared.retention
	}
	return s.obj.Premake(), s.obj.Retention()
}

// reconcileSharing registers the object on its shared table, after the
// database phase ensured the table, and reports who uses the table. A
// consumer group another object registered first is refused: the two
// would share one dedup history.
func (r *IdempotentConsumerReconciler) reconcileSharing(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	if !sharedTable(obj) {
		obj.Status.SharedTable = nil
		return nil
	}
	if !s.databaseOK {
		return nil
	}
	ss, ok := s.store.(SharedTableStore)
	if !ok {
		return fmt.Errorf("registering on shared table %s: the table store %T cannot register users", obj.Status.Table, s.store)
	}
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	users, err := ss.Register(dctx, dedup.User{
		ID:           string(obj.UID),
		Group:        obj.Spec.Kafka.GroupID,
		Object:       obj.Namespace + "/" + obj.Name,
		Retention:    obj.Retention(),
		Premake:      obj.Premake(),
		DropOnDelete: obj.DeletionPolicy() == kafkav1alpha1.DeletionDelete,
	})
	var inUse *dedup.GroupInUseError
	switch {
	case errors.As(err, &inUse):
		s.databaseOK = false
		obj.Status.SharedTable = nil
		msg := fmt.Sprintf("Consumer group %q is already registered on shared table %s by %s: each object on a shared table needs its own consumer group, or the two would share one dedup history. Choose another kafka.groupID (a new object), or delete %s",
			inUse.Group, inUse.Table, inUse.Holder, inUse.Holder)
		if inUse.Holder == obj.Namespace+"/"+obj.Name {
			// A predecessor of this name that was deleted without reaching
			// the database (its Secret gone) could not unregister. It may
			// also be an object of this name in another cluster: only a
			// person can tell, so the row is not taken over.
			msg = fmt.Sprintf("Consumer group %q is registered on shared table %s by an earlier object named %s (UID %s), not this one: one deleted while it could not reach the database, or one of that name in another cluster. If it is gone, delete its registration: DELETE FROM %s.%s WHERE user_id = '%s'",
				inUse.Group, inUse.Table, inUse.Holder, inUse.ID, tableOf(obj).WithDefaults().Schema, dedup.UsersTableName(tableOf(obj)), inUse.ID)
		}
		r.databaseNotReady(ctx, s, kafkav1alpha1.ReasonConsumerGroupInUse, msg, false)
		return nil
	case err != nil:
		s.databaseOK = false
		r.databaseFailure(ctx, s, err)
		return nil
	}
	premake, retention := dedup.EffectivePolicy(users, obj.Premake(), obj.Retention())
	s.shared = &sharedPolicy{premake: premake, retention: retention}
	st := &kafkav1alpha1.SharedTableStatus{EffectiveRetention: retention.String(), EffectivePremake: int32(premake)} //nolint:gosec // G115: premake is at most 90 (CRD), and so is every user's
	for _, u := range users {
		st.Users = append(st.Users, kafkav1alpha1.SharedTableUser{
			Object: u.Object, ConsumerGroup: u.Group, Retention: u.Retention.String(), Premake: int32(u.Premake), //nolint:gosec // G115: at most 90 (CRD)
		})
	}
	obj.Status.SharedTable = st
	return nil
}

// sharingProblem explains an ownership refusal that sharing is part of: a
// shared table named by an exclusive object, or a table another object owns
// exclusively named by a shared one.
func sharingProblem(obj *kafkav1alpha1.IdempotentConsumer, own *dedup.OwnershipError) (string, bool) {
	switch {
	case dedup.IsSharedOwner(own.Owner) && !sharedTable(obj):
		return fmt.Sprintf("Table %s is shared (objects with spec.dedup.sharing Shared use it, each with its own consumer group); this object's sharing is Exclusive. Set spec.dedup.sharing: Shared to join it with consumer group %q, or choose another table",
			own.Table, obj.Spec.Kafka.GroupID), true
	case own.Owner != "" && sharedTable(obj):
		return fmt.Sprintf("Table %s belongs to one object exclusively (UID %s); this object asks to share it. Set spec.dedup.sharing: Shared on that object first (its table then becomes shared), or choose another table",
			own.Table, own.Owner), true
	}
	return "", false
}

// leaveSharedTable unregisters a deleted object from its shared table and
// drops the table if it was the last user and its deletionPolicy is Delete.
// Events say which, and who still uses a table that stays.
func (r *IdempotentConsumerReconciler) leaveSharedTable(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, db DatabaseConn, table dedup.Table) error {
	store, err := r.Stores.Open(ctx, db, table)
	if err != nil {
		return err
	}
	ss, ok := store.(SharedTableStore)
	if !ok {
		return fmt.Errorf("leaving shared table %s: the table store %T cannot unregister users", table, store)
	}
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	drop := obj.DeletionPolicy() == kafkav1alpha1.DeletionDelete
	res, err := ss.Leave(dctx, string(obj.UID), drop)
	var own *dedup.OwnershipError
	if errors.As(err, &own) {
		// Not shared (any more): nothing to unregister, nothing of ours to drop.
		r.event(obj, corev1.EventTypeWarning, kafkav1alpha1.ReasonTableNotOwned, actionDelete,
			fmt.Sprintf("Table %s was left in place: it is not a shared table (owner %q)", table, own.Owner))
		return nil
	}
	if err != nil {
		return err
	}
	logger := log.FromContext(ctx)
	switch {
	case res.Dropped:
		r.event(obj, corev1.EventTypeNormal, ReasonTableDropped, actionDelete,
			fmt.Sprintf("Dropped shared table %s: this object was its last user (deletionPolicy Delete)", table))
		logger.Info("Dropped shared table: last user", "table", table.String())
	case !res.WasRegistered:
		r.event(obj, corev1.EventTypeNormal, ReasonTableReleased, actionDelete,
			fmt.Sprintf("This object was not registered on shared table %s (it never got that far); the table is left as it is", table))
		logger.Info("Deleted before registering on the shared table", "table", table.String())
	case len(res.Remaining) > 0:
		others := make([]string, len(res.Remaining))
		for i, u := range res.Remaining {
			others[i] = fmt.Sprintf("%s (group %s)", u.Object, u.Group)
		}
		r.event(obj, corev1.EventTypeNormal, ReasonTableReleased, actionDelete,
			fmt.Sprintf("Unregistered consumer group %q from shared table %s; the table stays, still used by %s", obj.Spec.Kafka.GroupID, table, strings.Join(truncateList(others, 5), ", ")))
		logger.Info("Left shared table; others still use it", "table", table.String(), "remaining", len(res.Remaining))
	default:
		r.event(obj, corev1.EventTypeNormal, ReasonTableRetained, actionDelete,
			fmt.Sprintf("Unregistered from shared table %s, its last user; deletionPolicy is Retain: the table is kept", table))
		logger.Info("Left shared table as its last user; kept", "table", table.String())
	}
	return nil
}

// sharedDeleteWait is Ready's message while a deleted user of a shared table
// cannot reach the database to unregister. deletionPolicy Retain does not
// release it: the registration must go, or it keeps counting.
func sharedDeleteWait(table dedup.Table, obj *kafkav1alpha1.IdempotentConsumer, cause string) string {
	return fmt.Sprintf("Waiting to unregister from shared table %s before deletion completes (to give up, delete its row from %s.%s, user_id %s, and remove the finalizer): %s",
		table, table.WithDefaults().Schema, dedup.UsersTableName(table), obj.UID, cause)
}

// tableReadyMessage is DatabaseReady's message when the table is ready.
func tableReadyMessage(obj *kafkav1alpha1.IdempotentConsumer, table dedup.Table) string {
	if sharedTable(obj) {
		return fmt.Sprintf("Table %s exists, is shared, and this object is registered on it with consumer group %q", table, obj.Spec.Kafka.GroupID)
	}
	return fmt.Sprintf("Table %s exists and carries this object's ownership marker", table)
}
