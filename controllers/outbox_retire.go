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
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/outbox"
)

// Retiring a topic (spec.kafka.strimzi). A topic removed from
// spec.kafka.topics may still have events in the table: emitted before the
// change, not yet published. Revoking its ACL at once would hold the relay's
// stream at the first of them (TopicAuthorizationFailed). So the KafkaUser
// keeps the ACL while the topic is in status.retiringTopics, and it leaves
// that list once the relay has published every row that was written for it:
//
//  1. The operator sees a topic the KafkaUser grants that the spec no
//     longer names (sinceTime).
//  2. Once an Ensure has succeeded in the same reconcile (the table's topic
//     check refuses the topic) and outbox.TopicsSettled says no transaction
//     that may still run an earlier check is open, a transaction id taken
//     then is until: every row for the topic is from a transaction below it
//     (consumer/outbox/topics.go says why).
//  3. Once the cursor's lo reaches until, every committed row below it is
//     published (window.go). An idle relay does not move its cursor, so it
//     is also enough that a snapshot's xmin has reached until (every
//     transaction below it has ended, and the snapshot sees their rows) and
//     that snapshot holds no unpublished row for the topic. The entry is
//     then marked published, the next reconcile applies the KafkaUser
//     without the topic, and the entry leaves the list once the KafkaUser no
//     longer grants it.
//
// A topic named again leaves the list at once; while the database cannot be
// read the list stands (the ACL is kept).

// Event reasons of a retiring topic (Normal).
const (
	ReasonOutboxTopicRetiring = "TopicRetiring"
	ReasonOutboxTopicRetired  = "TopicRetired"
)

const actionRetireTopic = "RetireTopic"

// noteRetiringTopics updates status.retiringTopics from the spec and the
// relay's KafkaUser before its ACLs are applied: a topic the spec names
// again leaves the list, a topic the KafkaUser grants and the spec no
// longer names joins it. Without Strimzi the list is empty.
func (r *OutboxReconciler) noteRetiringTopics(ctx context.Context, obj *kafkav1alpha1.Outbox) error {
	if obj.Spec.Kafka.Strimzi == nil {
		obj.Status.RetiringTopics = nil
		return nil
	}
	named := func(t string) bool { return slices.Contains(obj.Spec.Kafka.Topics, t) }
	user := &unstructured.Unstructured{}
	user.SetGroupVersionKind(strimziUserGVK)
	key := types.NamespacedName{Namespace: obj.Namespace, Name: OutboxKafkaUserName(obj)}
	err := r.APIReader.Get(ctx, key, user)
	var granted []string
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err): // none yet, or Strimzi not installed (resolvePlatforms says so)
	case err != nil:
		return fmt.Errorf("reading KafkaUser %s: %w", key.Name, err)
	case metav1.IsControlledBy(user, obj),
		metav1.GetControllerOf(user) == nil && user.GetAnnotations()[kafkav1alpha1.AnnotationAdoptPlatformObject] == obj.Name:
		// Its own, or one it adopts in this reconcile (applyStrimziObject):
		// what it grants now is what the relay may still need.
		granted = aclTopics(user)
	}
	var keep []kafkav1alpha1.OutboxRetiringTopic
	for _, rt := range obj.Status.RetiringTopics {
		// A published one stays until the KafkaUser no longer grants it:
		// until then the grant would bring it back as a new one.
		if !named(rt.Name) && (!rt.Published || slices.Contains(granted, rt.Name)) {
			keep = append(keep, rt)
		}
	}
	for _, t := range granted {
		if named(t) || slices.ContainsFunc(keep, func(rt kafkav1alpha1.OutboxRetiringTopic) bool { return rt.Name == t }) {
			continue
		}
		keep = append(keep, kafkav1alpha1.OutboxRetiringTopic{Name: t, SinceTime: metav1.NewTime(time.Now().UTC().Truncate(time.Second))})
		msg := fmt.Sprintf("Topic %q was removed from spec.kafka.topics: the emit function refuses new events to it, and KafkaUser %q keeps its ACL until the relay has published every event already emitted to it",
			t, key.Name)
		r.event(obj, corev1.EventTypeNormal, ReasonOutboxTopicRetiring, actionRetireTopic, msg)
		log.FromContext(ctx).Info("Topic retiring", "topic", t)
	}
	obj.Status.RetiringTopics = keep
	return nil
}

// relayedTopics are the topics the relay's KafkaUser grants: the spec's and
// the retiring ones not yet published.
func relayedTopics(obj *kafkav1alpha1.Outbox) []string {
	topics := slices.Clone(obj.Spec.Kafka.Topics)
	for _, rt := range obj.Status.RetiringTopics {
		if !rt.Published && !slices.Contains(topics, rt.Name) {
			topics = append(topics, rt.Name)
		}
	}
	return topics
}

// aclTopics are the literal topic names of a KafkaUser's ACLs.
func aclTopics(user *unstructured.Unstructured) []string {
	acls, _, _ := unstructured.NestedSlice(user.Object, "spec", "authorization", "acls")
	var topics []string
	for _, a := range acls {
		m, _ := a.(map[string]any)
		res, _ := m["resource"].(map[string]any)
		typ, _ := res["type"].(string)
		name, _ := res["name"].(string)
		if typ == "topic" && name != "" && !slices.Contains(topics, name) {
			topics = append(topics, name)
		}
	}
	return topics
}

// retireTopics takes the retiring topics a step on with what the stats read
// (steps 2 and 3 above).
func (r *OutboxReconciler) retireTopics(ctx context.Context, s *outboxState, st outbox.Stats) {
	obj := s.obj
	if len(obj.Status.RetiringTopics) == 0 {
		return
	}
	var keep []kafkav1alpha1.OutboxRetiringTopic
	for _, rt := range obj.Status.RetiringTopics {
		until, err := strconv.ParseUint(rt.Until, 10, 64)
		switch {
		case rt.Published:
		case rt.Until == "" || err != nil:
			// Called from outboxStats: this reconcile's Ensure succeeded.
			if h, ok := r.horizon(ctx, s); ok {
				rt.Until = strconv.FormatUint(h, 10)
				s.wake(time.Second) // the idle relay's case needs no wait for the relay
			} else {
				s.wake(2 * time.Second) // the topic check settling
			}
		case st.Lo >= until || r.publishedUpTo(ctx, s, rt.Name, until):
			msg := fmt.Sprintf("Topic %q is retired: the relay has published every event emitted to it; its ACL leaves KafkaUser %q",
				rt.Name, OutboxKafkaUserName(obj))
			r.event(obj, corev1.EventTypeNormal, ReasonOutboxTopicRetired, actionRetireTopic, msg)
			log.FromContext(ctx).Info("Topic retired", "topic", rt.Name)
			rt.Published = true
			s.wake(time.Second) // the next reconcile applies the KafkaUser without it
		}
		keep = append(keep, rt)
	}
	obj.Status.RetiringTopics = keep
}

// publishedUpTo reports whether every row for topic from a transaction
// below until is published (step 3, the idle relay's case); an error
// leaves the topic retiring, logged.
func (r *OutboxReconciler) publishedUpTo(ctx context.Context, s *outboxState, topic string, until uint64) bool {
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	pending, xmin, err := outbox.Unpublished(dctx, s.pool, s.tbl, topic)
	if err != nil {
		log.FromContext(ctx).Info("Cannot read a retiring topic's unpublished rows; its ACL stays", "topic", topic, "error", s.sec.scrub(err.Error()))
		return false
	}
	return xmin >= until && !pending
}

// horizon reads until (step 2) once the topic check has settled; not ok
// while it has not, or on an error (logged).
func (r *OutboxReconciler) horizon(ctx context.Context, s *outboxState) (uint64, bool) {
	dctx, cancel := context.WithTimeout(ctx, r.Options.DatabaseTimeout)
	defer cancel()
	var settled bool
	err := s.pool.AcquireFunc(dctx, func(c *pgxpool.Conn) error {
		var err error
		settled, err = outbox.TopicsSettled(dctx, c.Conn(), s.tbl)
		return err
	})
	var h uint64
	if err == nil && settled { // the connection given back first: the pool is shared
		h, err = outbox.Horizon(dctx, s.pool)
	}
	if err != nil {
		log.FromContext(ctx).Info("Cannot read the transaction horizon for a retiring topic; its ACL stays", "error", s.sec.scrub(err.Error()))
	}
	return h, err == nil && h != 0
}
