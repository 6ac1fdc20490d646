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
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

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
		netErr net.Error
	)
	switch {
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
	case ReasonTableLayoutNewer:
		return "The table was laid out by a newer operator release than this one (a downgrade); this release does not touch it (no partitions created or dropped, no drop on deletion). Run the newer release again: " + err.Error()
	case kafkav1alpha1.ReasonLockNotAvailable:
		return "A lock on the table stayed busy; retrying: " + err.Error()
	}
	return err.Error()
}
