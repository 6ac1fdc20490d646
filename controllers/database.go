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
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// reconcileDatabase reads the database URL from its Secret, opens the
// table's store and ensures the table exists with this object's ownership
// marker. Every failure becomes DatabaseReady=False with its own reason.
func (r *IdempotentConsumerReconciler) reconcileDatabase(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	table := tableOf(obj)
	if err := table.Validate(); err != nil {
		// The CRD's schema should have refused this; an object stored before
		// a stricter schema can still carry it.
		r.databaseNotReady(ctx, s, kafkav1alpha1.ReasonInvalidSpec, err.Error(), false)
		return nil
	}
	s.obj.Status.Table = table.String()

	val, prob, err := r.readSecretKey(ctx, obj.Namespace, obj.Spec.Database.URLSecretRef)
	if err != nil {
		return err
	}
	if prob != nil {
		r.databaseNotReady(ctx, s, prob.reason, prob.message, false)
		return nil
	}
	s.databaseURL = val
	s.addSecret(val.value, true)
	db, prob, err := r.databaseConn(ctx, s, val.value)
	if err != nil {
		return err
	}
	if prob != nil {
		r.databaseNotReady(ctx, s, prob.reason, prob.message, false)
		return nil
	}

	store, err := r.Stores.Open(ctx, db, table)
	if err != nil {
		r.databaseFailure(ctx, s, err)
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	if err := r.ensureTable(ctx, dctx, s, store); err != nil {
		if ae := (*apiError)(nil); errors.As(err, &ae) {
			return ae.err // the API server's failure, not the database's: retried by controller-runtime
		}
		r.databaseFailure(ctx, s, err)
		return nil
	}
	s.store = store
	s.databaseOK = true
	obj.SetCondition(kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionTrue, kafkav1alpha1.ReasonDatabaseReady,
		tableReadyMessage(obj, table)) // sharing.go
	r.reportDurability(ctx, dctx, s, store)
	return nil
}

// reportDurability sets DatabaseDurable from what the server says about
// synchronous_commit and its standbys. A warning only: it never changes Ready,
// since the consumer repairs lost commits from Kafka (positions table).
func (r *IdempotentConsumerReconciler) reportDurability(ctx, dctx context.Context, s *reconcileState, store TableStore) {
	d, err := store.Durability(dctx)
	if err != nil {
		r.warningCondition(ctx, s, actionCheckDurability, kafkav1alpha1.ConditionDatabaseDurable, metav1.ConditionUnknown,
			kafkav1alpha1.ReasonDurabilityUnknown, "Reading synchronous_commit and pg_stat_replication failed: "+err.Error())
		return
	}
	risks := d.Risks()
	if len(risks) == 0 {
		r.warningCondition(ctx, s, actionCheckDurability, kafkav1alpha1.ConditionDatabaseDurable, metav1.ConditionTrue, kafkav1alpha1.ReasonDurable,
			fmt.Sprintf("synchronous_commit=%s; %d standby(s), none asynchronous", d.SynchronousCommit, len(d.Standbys)))
		return
	}
	msgs := make([]string, len(risks))
	for i, rk := range risks {
		msgs[i] = rk.Message
	}
	r.warningCondition(ctx, s, actionCheckDurability, kafkav1alpha1.ConditionDatabaseDurable, metav1.ConditionFalse, risks[0].Reason,
		strings.Join(msgs, "; ")+"; the consumer redoes lost batches from Kafka (positions table) while the topic still holds them")
}

// apiError carries a failure of the Kubernetes API out of a database step,
// so it is returned from the reconcile (and retried) instead of being
// reported as a database problem.
type apiError struct{ err error }

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

// LiveOwnerError refuses an adoption from a UID that an IdempotentConsumer
// in this cluster still has: the table is that object's.
type LiveOwnerError struct {
	Table     string // schema-qualified
	UID       string // spec.database.adoptFromUID
	Namespace string // of the object holding UID
	Name      string
	Deleting  bool // the object is being deleted
}

func (e *LiveOwnerError) Error() string {
	state := "still exists"
	if e.Deleting {
		state = "is still being deleted"
	}
	state += " in this cluster (possibly pointing at another database now)"
	return fmt.Sprintf("Table %s is owned by IdempotentConsumer %s/%s (UID %s), which %s; spec.database.adoptFromUID adopts only a table whose owner is gone. Delete that object first (with deletionPolicy Retain, so the table stays), or choose another table",
		e.Table, e.Namespace, e.Name, e.UID, state)
}

// ensureTable is the store's EnsureTable with this object's UID as owner.
// With spec.database.adoptFromUID set and the table's marker naming that
// UID, it takes the table over (Adopt) and records a TableAdopted Event;
// in every other case the field changes nothing. Adoption needs the
// marker to name exactly that UID: a third owner, an unmarked table and
// an object of this cluster that still has the UID are refused.
func (r *IdempotentConsumerReconciler) ensureTable(ctx, dctx context.Context, s *reconcileState, store TableStore) error {
	obj := s.obj
	if sharedTable(obj) {
		return r.ensureSharedTable(ctx, dctx, s, store) // sharing.go
	}
	owner := string(obj.UID)
	err := store.EnsureTable(dctx, owner)
	from := obj.Spec.Database.AdoptFromUID
	var own *dedup.OwnershipError
	if from == "" || from == owner || !errors.As(err, &own) || own.Owner != from {
		return err
	}
	var list kafkav1alpha1.IdempotentConsumerList
	if err := r.Client.List(ctx, &list); err != nil {
		return &apiError{fmt.Errorf("listing IdempotentConsumers to check that UID %s is gone before adopting table %s: %w", from, own.Table, err)}
	}
	for i := range list.Items {
		if o := &list.Items[i]; string(o.UID) == from {
			return &LiveOwnerError{Table: own.Table, UID: from, Namespace: o.Namespace, Name: o.Name, Deleting: o.DeletionTimestamp != nil}
		}
	}
	res, err := store.Adopt(dctx, owner, from)
	if err != nil {
		return err
	}
	if res.Adopted || len(res.Partitions) > 0 {
		msg := fmt.Sprintf("Took over table %s from its previous owner %s (spec.database.adoptFromUID): the ownership marker of the table and of %d partition(s) now names this object; its rows are kept",
			own.Table, from, len(res.Partitions))
		r.event(obj, corev1.EventTypeNormal, ReasonTableAdopted, actionAdoptTable, s.scrub(msg))
		log.FromContext(ctx).Info("Adopted table", "table", own.Table, "previousOwner", from, "partitions", len(res.Partitions))
	}
	return nil
}

// databaseConn refuses a database host off the allow-list, and adds the CA
// of spec.database.caSecretRef, if any, to the database URL. A host not
// allowed, a missing Secret or key, or a value without a PEM certificate,
// is a problem for status.
func (r *IdempotentConsumerReconciler) databaseConn(ctx context.Context, s *reconcileState, databaseURL string) (DatabaseConn, *problem, error) {
	db := DatabaseConn{URL: databaseURL}
	if prob := r.Options.DatabaseHostAllowlist.checkDatabaseHosts(databaseURL); prob != nil {
		return db, prob, nil
	}
	ref := s.obj.Spec.Database.CASecretRef
	if ref == nil {
		return db, nil, nil
	}
	v, prob, err := r.secretKey(ctx, s, *ref)
	if err != nil || prob != nil {
		if prob != nil {
			prob = &problem{prob.reason, "Cannot read the PostgreSQL CA (spec.database.caSecretRef): " + prob.message}
		}
		return db, prob, err
	}
	if !x509.NewCertPool().AppendCertsFromPEM([]byte(v.value)) {
		return db, &problem{kafkav1alpha1.ReasonInvalidDatabaseCA, (&InvalidCAError{Name: ref.Name, Key: ref.Key}).Error()}, nil
	}
	db.CA = []byte(v.value)
	return db, nil, nil
}

// tableOf is the dedup table an object declares.
func tableOf(obj *kafkav1alpha1.IdempotentConsumer) dedup.Table {
	return dedup.Table{
		Schema:   obj.SchemaName(),
		Name:     obj.TableName(),
		Scope:    dedup.Scope(obj.Scope()),
		Interval: dedup.Interval(obj.Interval()),
	}
}

// databaseFailure classifies an error from opening the store or ensuring
// the table.
func (r *IdempotentConsumerReconciler) databaseFailure(ctx context.Context, s *reconcileState, err error) {
	var (
		own  *dedup.OwnershipError
		live *LiveOwnerError
	)
	if errors.As(err, &own) {
		reason, message := r.ownershipProblem(ctx, s.obj, own)
		r.databaseNotReady(ctx, s, reason, message, false)
		return
	}
	if errors.As(err, &live) {
		r.databaseNotReady(ctx, s, kafkav1alpha1.ReasonTableClaimed, live.Error(), false)
		return
	}
	reason, transient := classifyDatabaseError(err)
	logDatabaseDetail(ctx, s, reason, err)
	r.databaseNotReady(ctx, s, reason, describeDatabaseError(reason, err), transient)
}

// ownershipProblem explains who holds a table this object cannot take,
// and what spec.database.adoptFromUID can (or cannot) do about it.
func (r *IdempotentConsumerReconciler) ownershipProblem(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, own *dedup.OwnershipError) (string, string) {
	if msg, ok := sharingProblem(obj, own); ok { // sharing.go
		return kafkav1alpha1.ReasonTableClaimed, msg
	}
	from := obj.Spec.Database.AdoptFromUID
	if own.Owner == "" {
		msg := fmt.Sprintf(
			"Table %s exists but was not created by this operator (it has no ownership marker); refusing to manage it. Choose another table, or drop or rename that one",
			own.Table)
		if from != "" {
			msg += fmt.Sprintf("; spec.database.adoptFromUID (%s) adopts only a table whose marker names that UID, never an unmarked one", from)
		}
		return kafkav1alpha1.ReasonTableNotOwned, msg
	}
	mismatch := ""
	if from != "" && from != own.Owner {
		mismatch = fmt.Sprintf("; spec.database.adoptFromUID is %s, which does not match the UID in the table's marker, so the table is not adopted", from)
	}
	var list kafkav1alpha1.IdempotentConsumerList
	if err := r.Client.List(ctx, &list); err == nil {
		for i := range list.Items {
			if string(list.Items[i].UID) == own.Owner {
				return kafkav1alpha1.ReasonTableClaimed, fmt.Sprintf(
					"Table %s is owned by IdempotentConsumer %s/%s (UID %s); two objects cannot share one table. Choose another table%s",
					own.Table, list.Items[i].Namespace, list.Items[i].Name, own.Owner, mismatch)
			}
		}
	}
	if mismatch != "" {
		return kafkav1alpha1.ReasonTableClaimed, fmt.Sprintf(
			"Table %s is owned by UID %s, which is no IdempotentConsumer in this cluster%s. Set adoptFromUID to %s only if that object is gone for good and nothing else (another cluster) maintains this table; otherwise choose another table",
			own.Table, own.Owner, mismatch, own.Owner)
	}
	return kafkav1alpha1.ReasonTableClaimed, fmt.Sprintf(
		"Table %s is owned by UID %s, which is no IdempotentConsumer in this cluster (one deleted with deletionPolicy Retain, or one in another cluster); refusing to take it over. If it was this object's predecessor and nothing else (another cluster) maintains this table, set spec.database.adoptFromUID: %s to adopt it; otherwise choose another table",
		own.Table, own.Owner, own.Owner)
}
