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
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// secretValue is one Secret key's value as read this reconcile.
type secretValue struct {
	ref             kafkav1alpha1.SecretKeyRef
	value           string
	resourceVersion string
}

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
		fmt.Sprintf("Table %s exists and carries this object's ownership marker", table))
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

// databaseConn adds the CA of spec.database.caSecretRef, if any, to the
// database URL. A missing Secret or key, or a value without a PEM
// certificate, is a problem for status.
func (r *IdempotentConsumerReconciler) databaseConn(ctx context.Context, s *reconcileState, databaseURL string) (DatabaseConn, *problem, error) {
	db := DatabaseConn{URL: databaseURL}
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

// readSecretKey reads one key of a Secret with a direct GET: Secrets are
// not cached (only their metadata is watched), so the operator never holds
// every Secret of the cluster in memory. A missing Secret or key is a
// problem for status; any other API failure is returned.
func (r *IdempotentConsumerReconciler) readSecretKey(ctx context.Context, namespace string, ref kafkav1alpha1.SecretKeyRef) (secretValue, *problem, error) {
	var secret corev1.Secret
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return secretValue{}, &problem{kafkav1alpha1.ReasonSecretNotFound,
				fmt.Sprintf("Secret %q not found in namespace %q", ref.Name, namespace)}, nil
		}
		return secretValue{}, nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, ref.Name, err)
	}
	v, ok := secret.Data[ref.Key]
	if !ok || len(v) == 0 {
		if sv, ok2 := secret.StringData[ref.Key]; ok2 && sv != "" {
			v = []byte(sv)
		} else {
			return secretValue{}, &problem{kafkav1alpha1.ReasonSecretKeyMissing,
				fmt.Sprintf("Secret %q has no key %q, or it is empty", ref.Name, ref.Key)}, nil
		}
	}
	return secretValue{ref: ref, value: string(v), resourceVersion: secret.ResourceVersion}, nil, nil
}

// secretKey reads a Secret key once per reconcile and remembers its value
// for scrubbing.
func (r *IdempotentConsumerReconciler) secretKey(ctx context.Context, s *reconcileState, ref kafkav1alpha1.SecretKeyRef) (secretValue, *problem, error) {
	if v, ok := s.secretValues[ref]; ok {
		return v, nil, nil
	}
	v, prob, err := r.readSecretKey(ctx, s.obj.Namespace, ref)
	if err != nil || prob != nil {
		return v, prob, err
	}
	if s.secretValues == nil {
		s.secretValues = map[kafkav1alpha1.SecretKeyRef]secretValue{}
	}
	s.secretValues[ref] = v
	s.addSecret(v.value, false)
	return v, nil, nil
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
	r.databaseNotReady(ctx, s, reason, describeDatabaseError(reason, err), transient)
}

// ownershipProblem explains who holds a table this object cannot take,
// and what spec.database.adoptFromUID can (or cannot) do about it.
func (r *IdempotentConsumerReconciler) ownershipProblem(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, own *dedup.OwnershipError) (string, string) {
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

// classifyDatabaseError maps an error to a condition reason, and says
// whether retrying unchanged can help.
func classifyDatabaseError(err error) (reason string, transient bool) {
	var (
		pgErr  *pgconn.PgError
		urlErr *InvalidURLError
		tlsErr *DatabaseTLSError
		verErr *tls.CertificateVerificationError
		layout *dedup.LayoutError
		lock   *dedup.LockError
		netErr net.Error
	)
	switch {
	case errors.As(err, &urlErr), errors.As(err, &tlsErr):
		return kafkav1alpha1.ReasonInvalidURL, false
	case errors.As(err, &verErr):
		// Retried: a renewed server certificate or a CA Secret being
		// rotated can fix it without a change to the object.
		return kafkav1alpha1.ReasonCertificateRejected, true
	case errors.As(err, &layout):
		return kafkav1alpha1.ReasonTableLayoutMismatch, false
	case errors.Is(err, dedup.ErrInvalidIdentifier):
		return kafkav1alpha1.ReasonInvalidSpec, false
	case errors.As(err, &lock) || dedup.IsRetryable(err):
		return kafkav1alpha1.ReasonLockNotAvailable, true
	case errors.As(err, &pgErr):
		switch {
		case pgErr.Code == "28P01" || pgErr.Code == "28000":
			return kafkav1alpha1.ReasonAuthenticationFailed, false
		case pgErr.Code == "3D000":
			return kafkav1alpha1.ReasonDatabaseNotFound, false
		case pgErr.Code == "42501":
			return kafkav1alpha1.ReasonPermissionDenied, false
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57P"), pgErr.Code == "53300":
			// connection exceptions, shutdown/cannot connect now, too many connections
			return kafkav1alpha1.ReasonDatabaseUnreachable, true
		}
		return kafkav1alpha1.ReasonDatabaseError, true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.As(err, &netErr), pgconn.Timeout(err):
		return kafkav1alpha1.ReasonDatabaseUnreachable, true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return kafkav1alpha1.ReasonDatabaseUnreachable, true
	}
	return kafkav1alpha1.ReasonDatabaseError, true
}

// describeDatabaseError is the condition message for a classified error.
func describeDatabaseError(reason string, err error) string {
	switch reason {
	case kafkav1alpha1.ReasonInvalidURL:
		return err.Error()
	case kafkav1alpha1.ReasonCertificateRejected:
		return "The PostgreSQL server's certificate did not verify (check spec.database.caSecretRef, or the system roots without one, and that the certificate names the host in the URL; sslmode=verify-ca skips the name check): " + err.Error()
	case kafkav1alpha1.ReasonAuthenticationFailed:
		return "The database refused the credentials in the database URL Secret (authentication failed); fix the Secret or the role: " + err.Error()
	case kafkav1alpha1.ReasonDatabaseNotFound:
		return "The database named in the database URL does not exist: " + err.Error()
	case kafkav1alpha1.ReasonPermissionDenied:
		return "The database role lacks a privilege the operator needs (CREATE on the database and schema, ownership of the table): " + err.Error()
	case kafkav1alpha1.ReasonDatabaseUnreachable:
		return "Cannot reach the database; retrying with backoff: " + err.Error()
	case kafkav1alpha1.ReasonLockNotAvailable:
		return "A lock on the table stayed busy; retrying: " + err.Error()
	}
	return err.Error()
}

// scrub removes every secret this reconcile read (and its URL-encoded
// forms) from a message meant for a condition, an event or a log line.
func (s *reconcileState) scrub(msg string) string {
	for _, secret := range s.secrets {
		if len(secret) < 4 {
			continue // too short to replace without mangling the message
		}
		msg = strings.ReplaceAll(msg, secret, "[redacted]")
	}
	return msg
}

// addSecret remembers a secret value read this reconcile, so scrub keeps it
// out of messages; for a database URL its password is remembered too.
func (s *reconcileState) addSecret(v string, isURL bool) {
	if v == "" {
		return
	}
	s.secrets = append(s.secrets, v, url.QueryEscape(v), url.PathEscape(v))
	if !isURL {
		return
	}
	if pu, err := url.Parse(v); err == nil && pu.User != nil {
		if pw, ok := pu.User.Password(); ok {
			s.addSecret(pw, false)
		}
	}
	if cfg, err := pgconn.ParseConfig(v); err == nil {
		s.addSecret(cfg.Password, false)
	}
}
