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
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// How a database failure becomes a condition: the error's kind (SQLSTATE,
// network, TLS, the dedup package's typed errors) picks the reason and
// whether a retry can help, and the reason picks the message's advice.

// classifyDatabaseError maps an error to a condition reason, and says
// whether retrying unchanged can help.
func classifyDatabaseError(err error) (reason string, transient bool) {
	var (
		urlErr *InvalidURLError
		tlsErr *DatabaseTLSError
		verErr *tls.CertificateVerificationError
		layout *dedup.LayoutError
		newer  *dedup.LayoutVersionError
		lock   *dedup.LockError
		pooler *dedup.TransactionPoolerError
		netErr net.Error
	)
	switch {
	case errors.As(err, &pooler):
		// Retried: the pooler's mode can change without a change to the
		// object; a new Secret brings the object back at once.
		return kafkav1alpha1.ReasonTransactionPooler, true
	case errors.As(err, &urlErr), errors.As(err, &tlsErr):
		return kafkav1alpha1.ReasonInvalidURL, false
	case errors.As(err, &verErr):
		// Retried: a renewed server certificate or a CA Secret being
		// rotated can fix it without a change to the object.
		return kafkav1alpha1.ReasonCertificateRejected, true
	case errors.As(err, &newer):
		return ReasonTableLayoutNewer, false
	case errors.As(err, &layout):
		return kafkav1alpha1.ReasonTableLayoutMismatch, false
	case errors.Is(err, dedup.ErrInvalidIdentifier):
		return kafkav1alpha1.ReasonInvalidSpec, false
	case errors.As(err, &lock) || dedup.IsRetryable(err):
		return kafkav1alpha1.ReasonLockNotAvailable, true
	}
	// A PostgreSQL error: its SQLSTATE class, read by the dedup package
	// that runs the SQL, picks the reason.
	switch dedup.Classify(err) {
	case dedup.KindAuth:
		return kafkav1alpha1.ReasonAuthenticationFailed, false
	case dedup.KindNoDatabase:
		return kafkav1alpha1.ReasonDatabaseNotFound, false
	case dedup.KindPermission:
		return kafkav1alpha1.ReasonPermissionDenied, false
	case dedup.KindConnection, dedup.KindShutdown, dedup.KindTooManyConnections:
		return kafkav1alpha1.ReasonDatabaseUnreachable, true
	case dedup.KindNone:
		// not a PostgreSQL error: the network checks below decide
	default:
		return kafkav1alpha1.ReasonDatabaseError, true
	}
	if tlsFailure(err) {
		// Retried: the server's TLS set-up can be fixed without a change
		// to the object.
		return kafkav1alpha1.ReasonDatabaseTLSFailed, true
	}
	switch {
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

// ReasonTableLayoutNewer is the DatabaseReady reason for a table whose
// marker names a layout version newer than this release knows
// (dedup.LayoutVersionError): the operator was downgraded.
const ReasonTableLayoutNewer = "TableLayoutNewerThanOperator"

// tlsFailure reports a failed TLS handshake with the database that is not
// a rejected certificate: the server refused TLS (sslmode=require against a
// server without it), or what answered does not speak TLS.
func tlsFailure(err error) bool {
	var (
		verErr *tls.CertificateVerificationError
		rec    tls.RecordHeaderError
		alert  tls.AlertError
	)
	if errors.As(err, &verErr) {
		return false
	}
	if errors.As(err, &rec) || errors.As(err, &alert) {
		return true
	}
	// pgconn says so only in text: "tls error" wraps a handshake failure,
	// and a server answering 'N' to SSLRequest is "server refused TLS".
	msg := err.Error()
	return strings.Contains(msg, "server refused TLS connection") || strings.Contains(msg, "tls error")
}

// connectFailure reports whether err happened while connecting (dialing,
// TLS, authentication, the startup message), as opposed to a statement
// failing on an established session. Such an error quotes the host, port,
// user and database, and tells a refused port from an open one: its
// details go to the operator's log only, never to status or Events, so a
// namespace user who writes the URL Secret cannot use the operator to scan
// the network (docs/security.md).
func connectFailure(reason string, err error) bool {
	switch reason {
	case kafkav1alpha1.ReasonDatabaseUnreachable, kafkav1alpha1.ReasonAuthenticationFailed,
		kafkav1alpha1.ReasonDatabaseNotFound, kafkav1alpha1.ReasonCertificateRejected,
		kafkav1alpha1.ReasonDatabaseTLSFailed:
		return true
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}

// describeDatabaseError is the condition message for a classified error.
// A failure to connect gets a fixed message per reason, without the
// error's text (connectFailure); the caller logs the details
// (logDatabaseDetail).
func describeDatabaseError(reason string, err error) string {
	if connectFailure(reason, err) {
		return coarseConnectMessage(reason)
	}
	switch reason {
	case kafkav1alpha1.ReasonInvalidURL:
		return err.Error()
	case kafkav1alpha1.ReasonPermissionDenied:
		return "The database role lacks a privilege the operator needs (CREATE on the database and schema, ownership of the table): " + err.Error()
	case ReasonTableLayoutNewer:
		return "The table was laid out by a newer operator release than this one (a downgrade); this release does not touch it (no partitions created or dropped, no drop on deletion). Run the newer release again: " + err.Error()
	case kafkav1alpha1.ReasonLockNotAvailable:
		return "A lock on the table stayed busy; retrying: " + err.Error()
	case kafkav1alpha1.ReasonTransactionPooler:
		return "spec.database.urlSecretRef reaches PostgreSQL through a pooler in transaction mode (PgBouncer pool_mode=transaction, or a CloudNativePG Pooler in that mode); " +
			"the operator's table maintenance needs a session of its own (a session advisory lock, DETACH PARTITION CONCURRENTLY), so nothing was changed. " +
			"Point urlSecretRef at PostgreSQL directly (CloudNativePG: the <cluster>-rw Service) or at a session-mode pooler, and the consumer at the transaction pooler with " +
			"spec.database.consumerURLSecretRef and CONSUMER_DATABASE_POOLER=transaction (docs/database-secrets.md); retrying"
	}
	return err.Error()
}

// coarseConnectMessage is the status message of a failure to connect: what
// kind of failure, what to check, and where the details are. It names no
// host, port, user or database, and does not tell a refused connection
// from a timeout.
func coarseConnectMessage(reason string) string {
	const details = " (the operator's log has the details, for its administrators)"
	switch reason {
	case kafkav1alpha1.ReasonCertificateRejected:
		return "The PostgreSQL server's certificate did not verify (check spec.database.caSecretRef, or the system roots without one, and that the certificate names the host in the URL; sslmode=verify-ca skips the name check); retrying" + details
	case kafkav1alpha1.ReasonDatabaseTLSFailed:
		return "The TLS handshake with the database failed (the server refused TLS, or the host and port in the database URL are not a PostgreSQL server with TLS); retrying" + details
	case kafkav1alpha1.ReasonAuthenticationFailed:
		return "The database refused the credentials in the database URL Secret (authentication failed, or no pg_hba.conf entry admits them); fix the Secret or the role" + details
	case kafkav1alpha1.ReasonDatabaseNotFound:
		return "The database named in the database URL does not exist" + details
	case kafkav1alpha1.ReasonDatabaseUnreachable:
		return "Cannot reach the database at the host and port of the database URL Secret, or it closed the connection (check the URL, the server and the NetworkPolicies between the operator and the database); retrying with backoff" + details
	}
	return "Connecting to the database failed; retrying" + details
}

// logDatabaseDetail writes the full text of a database error the status
// message leaves out (connectFailure) to the operator's log, scrubbed of
// the secrets read this reconcile.
func logDatabaseDetail(ctx context.Context, s *reconcileState, reason string, err error) {
	if !connectFailure(reason, err) {
		return
	}
	log.FromContext(ctx).Info("Database connection failed", "reason", reason, "detail", s.scrub(err.Error()))
}
