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
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// The consumer's database role: the operator's role (spec.database.urlSecretRef)
// owns the table; the consumer pods connect as the role of
// spec.database.consumerURLSecretRef, which the operator grants only what the
// runtime needs (dedup.Engine.GrantConsumer) and takes it back from when the
// role or the group changes (status.consumerRole remembers what it granted).

// Event reasons and the action of the roles phase.
const (
	EventConsumerRoleGranted = "ConsumerRoleGranted"
	EventConsumerRoleRevoked = "ConsumerRoleRevoked"
	actionGrantConsumerRole  = "GrantConsumerRole"
)

// reconcileRoles runs after the database phase: it reads the consumer's URL,
// takes the grants back from the role granted before if the role or group
// changed, grants the current role, and sets DatabaseRoles. DatabaseRoles is
// a warning: it never changes Ready (a consumer whose role lacks its grants
// reports not ready itself, and so does ConsumerReady).
func (r *IdempotentConsumerReconciler) reconcileRoles(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	if !s.databaseOK || s.store == nil {
		obj.SetCondition(kafkav1alpha1.ConditionDatabaseRoles, metav1.ConditionUnknown, kafkav1alpha1.ReasonWaitingForDatabase,
			"Waiting for the database to be ready")
		return nil
	}
	owner := urlUser(s.databaseURL.value)
	ref := obj.Spec.Database.ConsumerURLSecretRef
	if ref == nil {
		if !r.revokePrevious(ctx, s, "", "") {
			return nil
		}
		r.rolesCondition(ctx, s, metav1.ConditionFalse, kafkav1alpha1.ReasonSingleRole, fmt.Sprintf(
			"The consumer uses spec.database.urlSecretRef, whose role %s owns table %s: a bug or a compromised consumer image could DROP or TRUNCATE it, and a SQL-sink statement runs with the owner's rights. Fine for development; give the consumer a role of its own with spec.database.consumerURLSecretRef (docs/security.md)",
			quoteRole(owner), obj.Status.Table))
		return nil
	}
	val, prob, err := r.secretKey(ctx, s, *ref)
	if err != nil {
		return err
	}
	if prob != nil {
		r.rolesCondition(ctx, s, metav1.ConditionFalse, prob.reason, "spec.database.consumerURLSecretRef: "+prob.message)
		return nil
	}
	s.addSecret(val.value, true)
	role, msg := r.consumerRole(s, val.value)
	if msg != "" {
		r.rolesCondition(ctx, s, metav1.ConditionFalse, kafkav1alpha1.ReasonInvalidConsumerURL, msg)
		return nil
	}
	group := obj.Spec.Kafka.GroupID
	if !r.revokePrevious(ctx, s, role, group) {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	res, err := s.store.GrantConsumer(dctx, role, group)
	switch {
	case errors.Is(err, dedup.ErrRoleNotFound):
		r.rolesCondition(ctx, s, metav1.ConditionFalse, kafkav1alpha1.ReasonConsumerRoleNotFound, fmt.Sprintf(
			"Role %s of spec.database.consumerURLSecretRef does not exist in the database; create it (CREATE ROLE ... LOGIN PASSWORD ...), the operator then grants it what the consumer needs", quoteRole(role)))
		s.requeue(r.Options.RetryMax)
		return nil
	case err != nil:
		reason, transient := classifyDatabaseError(err)
		r.rolesCondition(ctx, s, metav1.ConditionFalse, kafkav1alpha1.ReasonGrantFailed, fmt.Sprintf(
			"Granting role %s what the consumer needs on %s failed (%s): %v", quoteRole(role), obj.Status.Table, reason, err))
		if transient {
			s.requeue(r.Options.RetryMax)
		}
		return nil
	}
	obj.Status.ConsumerRole = &kafkav1alpha1.ConsumerRoleStatus{Role: role, Group: group}
	if len(res.Statements) > 0 {
		r.event(obj, corev1.EventTypeNormal, EventConsumerRoleGranted, actionGrantConsumerRole, s.scrub(fmt.Sprintf(
			"Granted role %s what the consumer of group %s needs on %s (%d statement(s))", quoteRole(role), group, obj.Status.Table, len(res.Statements))))
		log.FromContext(ctx).Info("Granted the consumer's role", "role", role, "group", group, "statements", res.Statements)
	}
	if res.Unrestricted != "" {
		r.rolesCondition(ctx, s, metav1.ConditionFalse, kafkav1alpha1.ReasonConsumerRoleUnrestricted, fmt.Sprintf(
			"The consumer connects as role %s, but %s: nothing holds it back on table %s (it could DROP or TRUNCATE it, or read and write other groups' rows). Give it a role that owns nothing, is neither superuser nor BYPASSRLS nor CREATEROLE, and is not a member (at any depth) of such a role or of the owner",
			quoteRole(role), res.Unrestricted, obj.Status.Table))
		return nil
	}
	scope := fmt.Sprintf("rows of group %s only", group)
	if obj.Scope() == kafkav1alpha1.ScopeGlobal {
		scope = fmt.Sprintf("all rows (scope Global shares them), the positions of group %s only", group)
	}
	r.rolesCondition(ctx, s, metav1.ConditionTrue, kafkav1alpha1.ReasonSeparateRoles, fmt.Sprintf(
		"The consumer connects as role %s: SELECT, INSERT, DELETE on %s and SELECT, INSERT, UPDATE on its positions, %s; role %s owns the table",
		quoteRole(role), obj.Status.Table, scope, quoteRole(owner)))
	return nil
}

// revokePrevious takes the grants back from the role and group granted
// before (status.consumerRole) when they differ from role and group ("" for
// none). It reports false, with DatabaseRoles set, when that failed; the
// status keeps the previous role so the next reconcile tries again.
func (r *IdempotentConsumerReconciler) revokePrevious(ctx context.Context, s *reconcileState, role, group string) bool {
	obj := s.obj
	prev := obj.Status.ConsumerRole
	if prev == nil || (prev.Role == role && prev.Group == group) {
		return true
	}
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	res, err := s.store.RevokeConsumer(dctx, prev.Role, prev.Group)
	if err != nil {
		reason, transient := classifyDatabaseError(err)
		r.rolesCondition(ctx, s, metav1.ConditionFalse, kafkav1alpha1.ReasonGrantFailed, fmt.Sprintf(
			"Taking back what role %s was granted for group %s on %s failed (%s): %v", quoteRole(prev.Role), prev.Group, obj.Status.Table, reason, err))
		if transient {
			s.requeue(r.Options.RetryMax)
		}
		return false
	}
	obj.Status.ConsumerRole = nil
	if len(res.Statements) > 0 {
		r.event(obj, corev1.EventTypeNormal, EventConsumerRoleRevoked, actionGrantConsumerRole, s.scrub(fmt.Sprintf(
			"Took back what role %s was granted for group %s on %s (%d statement(s))", quoteRole(prev.Role), prev.Group, obj.Status.Table, len(res.Statements))))
		log.FromContext(ctx).Info("Revoked the previous consumer role", "role", prev.Role, "group", prev.Group, "statements", res.Statements)
	}
	return true
}

// consumerRole reads the role name from the consumer's URL and checks it
// against the operator's: same database, TLS settings that do not leave the
// CA of spec.database.caSecretRef unused. The message (empty when fine)
// never quotes the URL.
func (r *IdempotentConsumerReconciler) consumerRole(s *reconcileState, consumerURL string) (role, msg string) {
	cfg, err := pgconn.ParseConfig(consumerURL)
	if err != nil {
		return "", "The URL in spec.database.consumerURLSecretRef does not parse as a PostgreSQL connection string (URI or keyword/value); see docs/database-secrets.md"
	}
	if s.obj.Spec.Database.CASecretRef != nil {
		mode, rootcert, err := explicitSSL(consumerURL)
		switch {
		case err != nil:
			return "", "The URL in spec.database.consumerURLSecretRef does not parse as a PostgreSQL connection string"
		case rootcert != "":
			return "", "The URL in spec.database.consumerURLSecretRef names an sslrootcert, but spec.database.caSecretRef is set: leave sslrootcert out, the consumer pods get the CA as PGSSLROOTCERT"
		case mode != "" && mode != "verify-full" && mode != "verify-ca":
			return "", fmt.Sprintf("The URL in spec.database.consumerURLSecretRef says sslmode=%s, which would leave the CA of spec.database.caSecretRef unused; use verify-full or verify-ca, or leave sslmode out", mode)
		}
	}
	if owner, err := pgconn.ParseConfig(s.databaseURL.value); err == nil && owner.Database != cfg.Database {
		return "", fmt.Sprintf("The URL in spec.database.consumerURLSecretRef names database %q, the one in spec.database.urlSecretRef %q: the consumer's role is granted on the table in the latter, so both must name the same database", cfg.Database, owner.Database)
	}
	if err := dedup.ValidateRole(cfg.User); err != nil {
		return "", "The URL in spec.database.consumerURLSecretRef names no usable user: " + err.Error()
	}
	return cfg.User, ""
}

// rolesCondition sets DatabaseRoles (a warning condition).
func (r *IdempotentConsumerReconciler) rolesCondition(ctx context.Context, s *reconcileState, status metav1.ConditionStatus, reason, message string) {
	r.warningCondition(ctx, s, actionGrantConsumerRole, kafkav1alpha1.ConditionDatabaseRoles, status, reason, message)
}

// urlUser is the user a database URL (or key=value string) names, "" if
// it names none or does not parse. pgconn.ParseConfig fills a missing user
// from PGUSER or the operator's own OS user, which is not who the URL's
// holder connects as: that fallback is not taken.
func urlUser(u string) string {
	cfg, err := pgconn.ParseConfig(u)
	if err != nil || !namesUser(u) {
		return ""
	}
	return cfg.User
}

var dsnUserRE = regexp.MustCompile(`(?:^|\s)user\s*=`)

// namesUser reports whether a connection string names its user itself.
func namesUser(s string) bool {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		return err == nil && (u.User != nil && u.User.Username() != "" || u.Query().Get("user") != "")
	}
	return dsnUserRE.MatchString(s)
}

// quoteRole quotes a role name for a message.
func quoteRole(role string) string {
	if role == "" {
		return "(unknown)"
	}
	return `"` + strings.ReplaceAll(role, `"`, `""`) + `"`
}
