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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// reconcileTopics asks the brokers for the topic's partition count and the
// retention of the topic and the dead-letter topic, and sets KafkaReady and
// the warnings TopicRetentionCovered and ReplicasWithinPartitions. What the
// brokers said is kept per object for Options.TopicRefresh, so the brokers
// are asked at most that often (and at once when the Kafka settings or
// credentials change).
//
// KafkaReady is False, with a reason naming the fix, when the brokers cannot
// be reached, the topic does not exist or (with spec.consumer, whose
// consumer dead-letters there) the dead-letter topic does not exist. For an
// object with spec.consumer that makes Ready False with the same reason (a
// transient problem: the database, partitions and the Deployment are still
// reconciled, so the consumer starts once the topic appears); a table-only
// object reports it without changing Ready. Each look at the brokers
// schedules the next one (the reconcile's RequeueAfter is the earliest of
// this and the partition schedule): after a look that could not tell or
// found a topic missing, Options.TopicRetryBase doubling up to
// TopicRetryMax (2s to 20s: a topic created later turns the object Ready
// within about 20s); after one that could, Options.TopicCheckInterval, so a
// changed retention.ms or partition count is noticed without a change to the
// object. A Kafka Secret that cannot be read schedules nothing: the Secret
// watch brings the object back.
func (r *IdempotentConsumerReconciler) reconcileTopics(ctx context.Context, s *reconcileState) error {
	obj := s.obj
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}

	values := map[kafkav1alpha1.SecretKeyRef]string{}
	for _, ref := range kafkaSecretRefs(obj) {
		v, prob, err := r.secretKey(ctx, s, ref)
		if err != nil {
			return err
		}
		if prob != nil {
			// The Secret watch brings the object back when it appears.
			msg := "Cannot read the Kafka credentials: " + prob.message
			r.kafkaNotReady(ctx, s, prob.reason, msg)
			r.topicsUnknown(ctx, s, prob.reason, msg)
			return nil
		}
		values[ref] = v.value
	}
	fp := topicFingerprint(obj, values)
	obs, fresh := r.topicCache.get(key, fp, s.now, r.Options.TopicRefresh)
	if !fresh {
		var (
			infos  map[string]TopicInfo
			reason string
		)
		conn, err := kafkaConnection(obj, func(ref kafkav1alpha1.SecretKeyRef) string { return values[ref] })
		if err != nil {
			reason = kafkav1alpha1.ReasonInvalidKafkaCredentials
		} else if infos, err = r.Topics.Inspect(ctx, conn, obj.Spec.Kafka.Topic, obj.DeadLetterTopic()); err != nil {
			reason = classifyKafkaError(err)
			if brokerConnectFailure(reason) {
				// The details (address, refused or reset, no such host)
				// are for the operator's log only: status and Events say
				// only the kind (docs/security.md).
				log.FromContext(ctx).Info("Cannot read the topics from the brokers", "reason", reason,
					"bootstrapServers", obj.Spec.Kafka.BootstrapServers, "error", s.scrub(err.Error()))
			}
		}
		sched := r.topicSchedule()
		sched.requireDLQ = obj.HasConsumer()
		obs = r.topicCache.put(key, fp, s.now, obj.Spec.Kafka.Topic, obj.DeadLetterTopic(), infos, err, reason, sched)
	}
	r.applyTopicObservation(ctx, s, obs)
	if !obs.next.IsZero() {
		s.requeue(obs.next.Sub(s.now))
	}
	return nil
}

// topicSchedule is when to look at the brokers again.
func (r *IdempotentConsumerReconciler) topicSchedule() topicSchedule {
	return topicSchedule{interval: r.Options.TopicCheckInterval, retryBase: r.Options.TopicRetryBase, retryMax: r.Options.TopicRetryMax}
}

// topicSchedule: after the nth inconclusive look in a row, look again after
// backoffDelay(retryBase, retryMax, n); after a conclusive one, after
// interval (never when interval <= 0). requireDLQ: a missing dead-letter
// topic makes a look inconclusive (the object's consumer dead-letters there).
type topicSchedule struct {
	interval, retryBase, retryMax time.Duration
	requireDLQ                    bool
}

// applyTopicObservation turns what the brokers said into status and the two
// warning conditions.
func (r *IdempotentConsumerReconciler) applyTopicObservation(ctx context.Context, s *reconcileState, obs topicObservation) {
	obj := s.obj
	topic, dlq := obj.Spec.Kafka.Topic, obj.DeadLetterTopic()

	if obs.good != nil {
		g := obs.good
		st := &kafkav1alpha1.TopicStatus{ObservedTime: ptrTime(obs.goodAt)}
		if g.main.Exists {
			st.Partitions = g.main.Partitions
			s.topicPartitions = g.main.Partitions
			if g.main.RetentionKnown {
				st.Retention = formatRetention(g.main.Retention)
			}
		}
		if g.dlq.Exists && g.dlq.RetentionKnown {
			st.DeadLetterRetention = formatRetention(g.dlq.Retention)
		}
		obj.Status.Topic = st
	} else {
		obj.Status.Topic = nil
	}

	if obs.err != nil {
		msg := fmt.Sprintf("Cannot read topic %q from the brokers: %v", topic, obs.err)
		if brokerConnectFailure(obs.reason) {
			msg = brokerFailureMessage(obs.reason, strings.Join(obj.Spec.Kafka.BootstrapServers, ","), topic)
		}
		if obs.good != nil {
			msg += fmt.Sprintf("; status.topic is what they said at %s", obs.goodAt.UTC().Format(time.RFC3339))
		}
		r.kafkaNotReady(ctx, s, obs.reason, msg)
		r.topicsUnknown(ctx, s, obs.reason, msg)
		return
	}
	brokers := strings.Join(obj.Spec.Kafka.BootstrapServers, ",")
	main, dlqInfo := obs.current.main, obs.current.dlq
	switch {
	case main.Err != nil:
		msg := fmt.Sprintf("The brokers %s refused to describe topic %q: %v", brokers, topic, main.Err)
		r.kafkaNotReady(ctx, s, classifyKafkaError(main.Err), msg)
		r.topicsUnknown(ctx, s, classifyKafkaError(main.Err), msg)
		return
	case !main.Exists:
		msg := fmt.Sprintf("Topic %q does not exist on the brokers %s: create it (the operator looks again on its own)", topic, brokers)
		if obj.HasConsumer() {
			msg = fmt.Sprintf("Topic %q does not exist on the brokers %s: create it, and its dead-letter topic %q (the operator looks again on its own)", topic, brokers, dlq)
		}
		r.kafkaNotReady(ctx, s, kafkav1alpha1.ReasonTopicNotFound, msg)
		r.topicsUnknown(ctx, s, kafkav1alpha1.ReasonTopicNotFound, msg)
		return
	}
	dlqMissing := obj.HasConsumer() && (dlqInfo.Err != nil || !dlqInfo.Exists)
	switch {
	case dlqMissing && dlqInfo.Err != nil:
		r.kafkaNotReady(ctx, s, classifyKafkaError(dlqInfo.Err),
			fmt.Sprintf("The brokers %s refused to describe the dead-letter topic %q: %v", brokers, dlq, dlqInfo.Err))
	case dlqMissing:
		r.kafkaNotReady(ctx, s, kafkav1alpha1.ReasonDeadLetterTopicNotFound, fmt.Sprintf(
			"Dead-letter topic %q does not exist on the brokers %s: the consumer sends the events it cannot process there and does not start without it; "+
				"create it, or name an existing one in spec.kafka.deadLetterTopic (the operator looks again on its own)", dlq, brokers))
	case obj.HasConsumer():
		r.kafkaReady(ctx, s, fmt.Sprintf("The brokers %s have topic %q (%d partitions) and its dead-letter topic %q", brokers, topic, main.Partitions, dlq))
	default:
		r.kafkaReady(ctx, s, fmt.Sprintf("The brokers %s have topic %q (%d partitions)", brokers, topic, main.Partitions))
	}

	// Replicas against partitions.
	want, what := obj.Replicas(), "spec.consumer.replicas"
	if obj.Autoscaled() {
		want, what = obj.Spec.Autoscaling.MinReplicasOrDefault(), "spec.autoscaling.minReplicas"
	}
	if want > main.Partitions {
		r.topicWarning(ctx, s, kafkav1alpha1.ConditionReplicasWithinPartitions, metav1.ConditionFalse, kafkav1alpha1.ReasonReplicasExceedPartitions,
			fmt.Sprintf("%s is %d but topic %q has %d partitions: %d consumer(s) will sit idle", what, want, topic, main.Partitions, want-main.Partitions))
	} else {
		r.topicWarning(ctx, s, kafkav1alpha1.ConditionReplicasWithinPartitions, metav1.ConditionTrue, kafkav1alpha1.ReasonReplicasWithinPartitions,
			fmt.Sprintf("%s is %d; topic %q has %d partitions", what, want, topic, main.Partitions))
	}

	// Dedup retention against topic retention.
	if !main.RetentionKnown {
		r.topicWarning(ctx, s, kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown, kafkav1alpha1.ReasonTopicRetentionUnknown,
			fmt.Sprintf("The brokers did not report retention.ms for topic %q", topic))
		return
	}
	dedupRetention := obj.Retention()
	shorter := func(d time.Duration) bool { return d == InfiniteRetention || dedupRetention < d }
	switch {
	case shorter(main.Retention):
		r.topicWarning(ctx, s, kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionFalse, kafkav1alpha1.ReasonRetentionShorterThanTopic,
			retentionMessage(dedupRetention, "topic", topic, main.Retention))
	case dlqInfo.Exists && dlqInfo.RetentionKnown && shorter(dlqInfo.Retention):
		r.topicWarning(ctx, s, kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionFalse, kafkav1alpha1.ReasonRetentionShorterThanDLQ,
			retentionMessage(dedupRetention, "dead-letter topic", dlq, dlqInfo.Retention))
	case dlqMissing:
		// Not True beside a missing dead-letter topic: whether its
		// retention is covered cannot be told (KafkaReady says what to do).
		r.topicWarning(ctx, s, kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown, kafkav1alpha1.ReasonDeadLetterTopicNotFound,
			fmt.Sprintf("Dedup retention %s covers topic %q (retention %s); the retention of dead-letter topic %q cannot be read until it exists (see KafkaReady)",
				dedupRetention, topic, formatRetention(main.Retention), dlq))
	default:
		text := fmt.Sprintf("Dedup retention %s covers topic %q (retention %s)", dedupRetention, topic, formatRetention(main.Retention))
		switch {
		case dlqInfo.Exists && dlqInfo.RetentionKnown:
			text += fmt.Sprintf(" and dead-letter topic %q (%s)", dlq, formatRetention(dlqInfo.Retention))
		case dlqInfo.Exists:
			text += fmt.Sprintf("; dead-letter topic %q reports no retention.ms", dlq)
		}
		r.topicWarning(ctx, s, kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered, text)
	}
}

func retentionMessage(dedupRetention time.Duration, kind, topic string, topicRetention time.Duration) string {
	if topicRetention == InfiniteRetention {
		return fmt.Sprintf("The %s %q keeps records forever (retention.ms -1 or cleanup.policy compact), longer than the dedup retention %s: "+
			"a replay or an offset reset can process events older than the window again", kind, topic, dedupRetention)
	}
	return fmt.Sprintf("The dedup retention %s is shorter than the retention %s of the %s %q: a replay or an offset reset can process events "+
		"older than the window again; raise spec.dedup.retention to at least %s or lower the topic's retention.ms",
		dedupRetention, topicRetention, kind, topic, topicRetention)
}

// topicFingerprint identifies what an observation depends on: brokers,
// topics and credentials. A change asks the brokers again at once.
func topicFingerprint(obj *kafkav1alpha1.IdempotentConsumer, values map[kafkav1alpha1.SecretKeyRef]string) string {
	h := sha256.New()
	k := obj.Spec.Kafka
	w := func(parts ...string) {
		for _, p := range parts {
			h.Write([]byte(p))
			h.Write([]byte{0})
		}
	}
	w(strings.Join(k.BootstrapServers, ","), k.Topic, obj.DeadLetterTopic())
	if k.TLS != nil {
		w("tls", strconv.FormatBool(k.TLS.InsecureSkipVerify))
	}
	if k.SASL != nil {
		w("sasl", string(k.SASL.Mechanism))
	}
	for _, ref := range kafkaSecretRefs(obj) {
		w(ref.Name, ref.Key, values[ref])
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &mt
}

// topicPair is what the brokers said about the topic and the dead-letter topic.
type topicPair struct {
	main, dlq TopicInfo
}

// topicObservation is one object's latest look at the brokers.
type topicObservation struct {
	fingerprint string
	checked     time.Time
	// current is the latest answer, when err is nil.
	current topicPair
	// err and reason: the latest attempt failed.
	err    error
	reason string
	// good is the latest answer for this fingerprint, kept through failures
	// (for status and the autoscaling cap); goodAt is when it came.
	good   *topicPair
	goodAt time.Time
	// failures counts the inconclusive looks in a row (see conclusive).
	failures int
	// next is when to look again; zero for never (a conclusive look with
	// periodic rechecks disabled). A reconcile before it, and before the
	// refresh period ends, reuses this observation.
	next time.Time
}

// conclusive reports whether the look told what the warnings need: the
// topic exists and was described with its retention. Otherwise
// applyTopicObservation sets the warnings to Unknown.
func (o topicObservation) conclusive(requireDLQ bool) bool {
	m, d := o.current.main, o.current.dlq
	return o.err == nil && m.Err == nil && m.Exists && m.RetentionKnown && (!requireDLQ || (d.Err == nil && d.Exists))
}

// topicCache holds the latest observation per object.
type topicCache struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]topicObservation
}

// get returns the object's observation and whether it is still fresh: made
// for the same fingerprint less than refresh ago, and its next look not due.
func (c *topicCache) get(key types.NamespacedName, fingerprint string, now time.Time, refresh time.Duration) (topicObservation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.entries[key]
	if !ok || o.fingerprint != fingerprint {
		return topicObservation{fingerprint: fingerprint}, false
	}
	return o, now.Sub(o.checked) < refresh && !now.Before(o.checked) && (o.next.IsZero() || now.Before(o.next))
}

// put records an attempt, schedules the next one and returns the
// observation to use.
func (c *topicCache) put(key types.NamespacedName, fingerprint string, now time.Time, topic, dlq string,
	infos map[string]TopicInfo, err error, reason string, sched topicSchedule) topicObservation {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[types.NamespacedName]topicObservation{}
	}
	o := c.entries[key]
	if o.fingerprint != fingerprint {
		o = topicObservation{fingerprint: fingerprint}
	}
	o.checked, o.err, o.reason = now, err, reason
	if err == nil {
		o.current = topicPair{main: infos[topic], dlq: infos[dlq]}
		if o.current.main.Exists && o.current.main.Err == nil {
			good := o.current
			o.good, o.goodAt = &good, now
		}
	}
	if o.conclusive(sched.requireDLQ) {
		o.failures, o.next = 0, time.Time{}
		if sched.interval > 0 {
			o.next = now.Add(sched.interval)
		}
	} else {
		o.failures++
		o.next = now.Add(backoffDelay(sched.retryBase, sched.retryMax, o.failures))
	}
	c.entries[key] = o
	return o
}

func (c *topicCache) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// brokerConnectFailure reports whether a reason from classifyKafkaError
// means the brokers could not be asked (a failed dial, reset, timeout, TLS
// or SASL handshake). Such an error quotes the address and tells a refused
// port from an open one, so spec.kafka.bootstrapServers would make the
// operator a port scanner: its details go to the operator's log only, as
// for the database (connectFailure in dberrors.go).
func brokerConnectFailure(reason string) bool {
	return reason == kafkav1alpha1.ReasonBrokerUnreachable || reason == kafkav1alpha1.ReasonKafkaAuthFailed ||
		reason == kafkav1alpha1.ReasonKafkaTLSFailed
}

// brokerFailureMessage is the fixed status message of a connect failure. It
// names the addresses of spec.kafka.bootstrapServers, as written there, and
// nothing the dial found out: the same words for a refused port, an open
// one that hangs up, a timeout and a name that does not resolve.
func brokerFailureMessage(reason, brokers, topic string) string {
	switch reason {
	case kafkav1alpha1.ReasonKafkaAuthFailed:
		return fmt.Sprintf("The brokers %s did not accept the SASL credentials of spec.kafka.sasl, so topic %q could not be read; the operator's log says more", brokers, topic)
	case kafkav1alpha1.ReasonKafkaTLSFailed:
		return fmt.Sprintf("The TLS handshake with the brokers %s failed, so topic %q could not be read: their certificate is not signed by the CA of spec.kafka.tls or names another host, or the port does not speak TLS; the operator's log says which", brokers, topic)
	}
	return fmt.Sprintf("Cannot reach the brokers %s of spec.kafka.bootstrapServers to read topic %q (no connection, no answer or no TLS session): check the addresses; the operator's log says why, and the operator looks again on its own", brokers, topic)
}
