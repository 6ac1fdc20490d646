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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

func withKafka(brokers []string, topic string) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.BootstrapServers = brokers
		o.Spec.Kafka.Topic = topic
	}
}

func withReplicas(n int32) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.Replicas = &n }
}

func retentionMS(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// alterTopic sets one topic config through the Kafka admin API.
func alterTopic(t testing.TB, k *consumertest.Kafka, topic, name, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &kafka.Client{Addr: kafka.TCP(k.Brokers()...), Timeout: 10 * time.Second}
	resp, err := c.AlterConfigs(ctx, &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic,
		Configs: []kafka.AlterConfigRequestConfig{{Name: name, Value: value}},
	}}})
	if err != nil {
		t.Fatalf("altering %s of %s: %v", name, topic, err)
	}
	for _, e := range resp.Errors {
		if e != nil {
			t.Fatalf("altering %s of %s: %v", name, topic, e)
		}
	}
}

// expireTopicCache moves the manager's clock past TopicRefresh, so the next
// reconcile asks the brokers again, and makes that reconcile happen.
func (te *testEnv) expireTopicCache(t testing.TB, ns, name string) {
	t.Helper()
	te.clock.SetTime(te.clock.Now().Add(te.r.Options.TopicRefresh + time.Second))
	te.poke(t, ns, name)
}

// topicRecheckIn is how long after now the reconciler will look at the
// object's topics again, from its topic cache.
func (te *testEnv) topicRecheckIn(t testing.TB, ns, name string, now time.Time) time.Duration {
	t.Helper()
	c := &te.r.topicCache
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.entries[types.NamespacedName{Namespace: ns, Name: name}]
	if !ok || o.next.IsZero() {
		t.Fatalf("%s/%s: no topic recheck scheduled (cached: %v)", ns, name, ok)
	}
	return o.next.Sub(now)
}

// testTopicRetention runs objects against an in-process broker with topics of
// different retention, and checks that the TopicRetentionCovered and
// ReplicasWithinPartitions warnings appear and clear, without touching Ready
// (a missing topic or broker does: KafkaReady).
func testTopicRetention(t *testing.T, te *testEnv) {
	k := consumertest.NewKafka(t)
	ctx := context.Background()
	day := 24 * time.Hour
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		topic      string
		partitions int
		retention  time.Duration
	}{
		{"short", 3, day},
		{"long", 3, 14 * day},
		{"mutable", 2, day},
		{"withdlq", 1, day},
		{"withdlq.dlq", 1, 30 * day},
		// A consumer needs its dead-letter topic to be Ready (KafkaReady).
		{"long.dlq", 1, day},
		{"mutable.dlq", 1, day},
	} {
		if err := k.CreateTopic(cctx, tc.topic, tc.partitions, map[string]string{"retention.ms": retentionMS(tc.retention)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.CreateTopic(cctx, "short.dlq", 1, map[string]string{"retention.ms": retentionMS(day)}); err != nil {
		t.Fatal(err)
	}
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	brokers := k.Brokers()

	covered := func(name string, status metav1.ConditionStatus, reason string) *kafkav1alpha1.IdempotentConsumer {
		t.Helper()
		te.waitCondition(t, ns, name, kafkav1alpha1.ConditionTopicRetentionCovered, status, reason)
		// The warning never holds Ready back.
		obj := te.waitReady(t, ns, name)
		if c := obj.GetCondition(kafkav1alpha1.ConditionTopicRetentionCovered); c.Status != status || c.Reason != reason {
			t.Errorf("%s: TopicRetentionCovered changed to %s/%s", name, c.Status, c.Reason)
		}
		return obj
	}

	t.Run("Covered", func(t *testing.T) {
		te.create(t, newConsumer(ns, "short", withTable("short"), withKafka(brokers, "short"), withReplicas(2)))
		te.waitReady(t, ns, "short")
		obj := covered("short", metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered)
		st := obj.Status.Topic
		if st == nil || st.Partitions != 3 || st.Retention != "24h0m0s" || st.DeadLetterRetention != "24h0m0s" || st.ObservedTime == nil {
			t.Errorf("status.topic = %+v, want 3 partitions, retention 24h for both topics", st)
		}
		if c := obj.GetCondition(kafkav1alpha1.ConditionReplicasWithinPartitions); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("ReplicasWithinPartitions = %+v, want True (2 replicas, 3 partitions)", c)
		}
	})

	t.Run("ShorterUntilSpecRaised", func(t *testing.T) {
		te.create(t, newConsumer(ns, "long", withTable("long"), withKafka(brokers, "long")))
		obj := covered("long", metav1.ConditionFalse, kafkav1alpha1.ReasonRetentionShorterThanTopic)
		msg := obj.GetCondition(kafkav1alpha1.ConditionTopicRetentionCovered).Message
		if !strings.Contains(msg, "168h0m0s") || !strings.Contains(msg, "336h0m0s") {
			t.Errorf("message %q should name both retentions", msg)
		}
		if !te.hasEvents(t, ns, "long", kafkav1alpha1.ReasonRetentionShorterThanTopic) {
			t.Error("no Warning Event for the short retention")
		}
		// Raising the dedup retention to the topic's clears it at once (the
		// spec change is a new reconcile; the cached topic answer is reused).
		if err := te.update(t, ns, "long", func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Dedup.Retention = &metav1.Duration{Duration: 14 * day}
		}); err != nil {
			t.Fatal(err)
		}
		covered("long", metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered)
	})

	t.Run("DeadLetterTopicLonger", func(t *testing.T) {
		te.create(t, newConsumer(ns, "dlq", withTable("dlq"), withKafka(brokers, "withdlq")))
		covered("dlq", metav1.ConditionFalse, kafkav1alpha1.ReasonRetentionShorterThanDLQ)
	})

	t.Run("TopicConfigChanges", func(t *testing.T) {
		te.create(t, newConsumer(ns, "mutable", withTable("mutable"), withKafka(brokers, "mutable")))
		covered("mutable", metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered)

		// retention.ms -1 keeps records forever: always a warning.
		alterTopic(t, k, "mutable", "retention.ms", "-1")
		te.expireTopicCache(t, ns, "mutable")
		obj := covered("mutable", metav1.ConditionFalse, kafkav1alpha1.ReasonRetentionShorterThanTopic)
		if obj.Status.Topic == nil || obj.Status.Topic.Retention != "Infinite" {
			t.Errorf("status.topic = %+v, want retention Infinite", obj.Status.Topic)
		}

		// Back to a day: the warning clears.
		alterTopic(t, k, "mutable", "retention.ms", retentionMS(day))
		te.expireTopicCache(t, ns, "mutable")
		covered("mutable", metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered)

		// A compacted topic keeps the last record of each key forever.
		alterTopic(t, k, "mutable", "cleanup.policy", "compact")
		te.expireTopicCache(t, ns, "mutable")
		covered("mutable", metav1.ConditionFalse, kafkav1alpha1.ReasonRetentionShorterThanTopic)
	})

	t.Run("ReplicasExceedPartitions", func(t *testing.T) {
		if err := te.update(t, ns, "short", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.Replicas = ptr32(5) }); err != nil {
			t.Fatal(err)
		}
		obj := te.waitCondition(t, ns, "short", kafkav1alpha1.ConditionReplicasWithinPartitions, metav1.ConditionFalse, kafkav1alpha1.ReasonReplicasExceedPartitions)
		if msg := obj.GetCondition(kafkav1alpha1.ConditionReplicasWithinPartitions).Message; !strings.Contains(msg, "2 consumer(s) will sit idle") {
			t.Errorf("message %q", msg)
		}
		te.waitReady(t, ns, "short")
		if err := te.update(t, ns, "short", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.Replicas = ptr32(3) }); err != nil {
			t.Fatal(err)
		}
		te.waitCondition(t, ns, "short", kafkav1alpha1.ConditionReplicasWithinPartitions, metav1.ConditionTrue, kafkav1alpha1.ReasonReplicasWithinPartitions)
	})

	t.Run("TopicMissing", func(t *testing.T) {
		// A consumer needs its topic: Ready says so (kafkaready_test.go).
		te.create(t, newConsumer(ns, "missing", withTable("missing"), withKafka(brokers, "nosuchtopic")))
		te.waitCondition(t, ns, "missing", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTopicNotFound)
		te.waitCondition(t, ns, "missing", kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown, kafkav1alpha1.ReasonTopicNotFound)
	})

	t.Run("BrokerDown", func(t *testing.T) {
		// A broker of its own, to stop.
		own := consumertest.NewKafka(t)
		// A deadline of its own: cctx was set when the test began, and the
		// subtests before this one can use all of it on a loaded machine.
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		defer ocancel()
		for _, topic := range []string{"orders", "orders.dlq"} {
			if err := own.CreateTopic(octx, topic, 4, map[string]string{"retention.ms": retentionMS(day)}); err != nil {
				t.Fatal(err)
			}
		}
		te.create(t, newConsumer(ns, "down", withTable("down"), withKafka(own.Brokers(), "orders")))
		before := covered("down", metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered)
		own.Close()

		te.expireTopicCache(t, ns, "down")
		te.waitCondition(t, ns, "down", kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown, kafkav1alpha1.ReasonBrokerUnreachable)
		// A consumer whose brokers cannot be reached is not Ready; the
		// table, its partitions and the Deployment are still looked after.
		obj := te.waitCondition(t, ns, "down", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonBrokerUnreachable)
		if c := obj.GetCondition(kafkav1alpha1.ConditionKafkaReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != kafkav1alpha1.ReasonBrokerUnreachable {
			t.Errorf("KafkaReady = %+v, want False/BrokerUnreachable", c)
		}
		if c := obj.GetCondition(kafkav1alpha1.ConditionReplicasWithinPartitions); c == nil || c.Status != metav1.ConditionUnknown ||
			c.Reason != kafkav1alpha1.ReasonBrokerUnreachable {
			t.Errorf("ReplicasWithinPartitions = %+v, want Unknown/BrokerUnreachable", c)
		}
		for _, ct := range []string{kafkav1alpha1.ConditionDatabaseReady, kafkav1alpha1.ConditionPartitionsReady, kafkav1alpha1.ConditionConsumerReady} {
			if c := obj.GetCondition(ct); c == nil || c.Status != metav1.ConditionTrue {
				t.Errorf("%s = %+v while the broker is down, want True", ct, c)
			}
		}
		// What the brokers said last is kept, with its time.
		if st := obj.Status.Topic; st == nil || st.Partitions != 4 || !st.ObservedTime.Equal(before.Status.Topic.ObservedTime) {
			t.Errorf("status.topic = %+v, want the last answer (4 partitions at %v)", st, before.Status.Topic.ObservedTime)
		}
		// Maintenance still runs, and the brokers are asked again after the
		// first backoff step (this is the first failed look since the last
		// good one), or at the partition schedule if that is earlier.
		now := te.clock.Now()
		res, err := te.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "down"}})
		if err != nil {
			t.Fatal(err)
		}
		if recheck := te.topicRecheckIn(t, ns, "down", now); recheck != te.r.Options.TopicRetryBase {
			t.Errorf("topic recheck in %s after the first failure, want TopicRetryBase %s", recheck, te.r.Options.TopicRetryBase)
		}
		// (Or sooner: BrokerUnreachable is a transient problem of a
		// consumer object, retried on the general backoff too, which finds
		// the topic answer cached.)
		next := te.get(t, ns, "down").Status.NextMaintenanceTime
		if want := min(next.Sub(now), te.r.Options.TopicRetryBase); res.RequeueAfter <= 0 || res.RequeueAfter > want {
			t.Errorf("RequeueAfter = %s with the broker down, want at most %s (schedule %s, topic retry %s)",
				res.RequeueAfter, want, next.Sub(now), te.r.Options.TopicRetryBase)
		}
	})
}
