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
	"net"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// countingInspector counts the looks at the brokers, per bootstrap address.
type countingInspector struct {
	inner TopicInspector
	mu    sync.Mutex
	looks map[string]int
}

func (c *countingInspector) Inspect(ctx context.Context, conn KafkaConnection, topics ...string) (map[string]TopicInfo, error) {
	c.mu.Lock()
	if c.looks == nil {
		c.looks = map[string]int{}
	}
	c.looks[conn.Brokers[0]]++
	c.mu.Unlock()
	return c.inner.Inspect(ctx, conn, topics...)
}

func (c *countingInspector) count(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.looks[addr]
}

// freePort returns a loopback port nothing listens on (just now).
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestTopicRecheck checks that the topic warnings follow the brokers without
// any change to the object: a broker that goes away and comes back, and a
// retention.ms shortened or lengthened behind the operator's back. It runs its
// own manager on the real clock, with the periodic check every 2s and the
// retry after a failed look at 200ms doubling to 1s (production: 1h, and 1m
// doubling to 10m), so every wait is a few seconds.
func TestTopicRecheck(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	inspector := &countingInspector{inner: KafkaAdmin{Timeout: 2 * time.Second}}
	opts := Options{
		TopicCheckInterval: 2 * time.Second,
		TopicRetryBase:     200 * time.Millisecond,
		TopicRetryMax:      time.Second,
		KafkaTimeout:       2 * time.Second,
	}
	te := startEnv(t, envOptions{realClock: true, options: opts, topics: inspector})
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	day := 24 * time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("BrokerDownAndBack", func(t *testing.T) {
		port := freePort(t)
		k := consumertest.NewKafka(t, kfake.Ports(port))
		if err := k.CreateTopic(ctx, "orders", 2, map[string]string{"retention.ms": retentionMS(day)}); err != nil {
			t.Fatal(err)
		}
		k.MustCreateTopic(t, "orders.dlq", 1)
		addr := k.Brokers()[0]
		te.create(t, newConsumer(ns, "flaky", withTable("flaky"), withKafka(k.Brokers(), "orders")))
		te.waitReady(t, ns, "flaky")
		created := te.waitCondition(t, ns, "flaky", kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered)

		// The periodic check notices the broker is gone.
		k.Close()
		te.waitCondition(t, ns, "flaky", kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown, kafkav1alpha1.ReasonBrokerUnreachable)
		te.waitCondition(t, ns, "flaky", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonBrokerUnreachable)

		// While it stays down the brokers are asked again on the backoff
		// (200ms, 400ms, 800ms, 1s, 1s ...), and a failed look that finds
		// nothing new writes no status.
		key := types.NamespacedName{Namespace: ns, Name: "flaky"}
		failures := func() int {
			c := &te.r.topicCache
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.entries[key].failures
		}
		eventually(t, 10*time.Second, "2 failed looks", func() (bool, string) {
			return failures() >= 2, fmt.Sprintf("%d failures", failures())
		})
		quiet := te.get(t, ns, "flaky")
		eventually(t, 10*time.Second, "2 more failed looks", func() (bool, string) {
			return failures() >= 4, fmt.Sprintf("%d failures", failures())
		})
		if got := te.get(t, ns, "flaky"); got.ResourceVersion != quiet.ResourceVersion {
			t.Errorf("status written by failed looks with nothing new: %s", conditionsSummary(got))
		}
		c := &te.r.topicCache
		c.mu.Lock()
		o := c.entries[key]
		c.mu.Unlock()
		if want := backoffDelay(opts.TopicRetryBase, opts.TopicRetryMax, o.failures); o.next.Sub(o.checked) != want {
			t.Errorf("after %d failures the next look is %s later, want %s", o.failures, o.next.Sub(o.checked), want)
		}

		// The broker comes back on the same address: the next retry (at most
		// TopicRetryMax away) sees it, with no change to the object.
		looks := inspector.count(addr)
		consumertest.NewKafka(t, kfake.Ports(port))
		// Not consumertest.CreateTopic: kafka-go's default transport still
		// pools a connection to the first broker at this address.
		admin := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 10 * time.Second, Transport: &kafka.Transport{}}
		resp, err := admin.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
			Topic: "orders", NumPartitions: 3, ReplicationFactor: 1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: retentionMS(day)}},
		}, {Topic: "orders.dlq", NumPartitions: 1, ReplicationFactor: 1}}})
		if err == nil {
			err = errors.Join(resp.Errors["orders"], resp.Errors["orders.dlq"])
		}
		if err != nil {
			t.Fatalf("creating the topic on the new broker: %v", err)
		}
		var got *kafkav1alpha1.IdempotentConsumer
		eventually(t, 10*time.Second, "TopicRetentionCovered True again", func() (bool, string) {
			got = te.get(t, ns, "flaky")
			c := got.GetCondition(kafkav1alpha1.ConditionTopicRetentionCovered)
			return c != nil && c.Status == metav1.ConditionTrue, conditionsSummary(got)
		})
		if got.Generation != created.Generation || got.Annotations["test.idempotency.dev/poke"] != "" {
			t.Errorf("the object changed: generation %d -> %d, annotations %v", created.Generation, got.Generation, got.Annotations)
		}
		if inspector.count(addr) <= looks {
			t.Errorf("no new look at the brokers (%d before, %d after)", looks, inspector.count(addr))
		}
		if c := got.GetCondition(kafkav1alpha1.ConditionReplicasWithinPartitions); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("ReplicasWithinPartitions = %+v, want True", c)
		}
		if st := got.Status.Topic; st == nil || st.Partitions != 3 {
			t.Errorf("status.topic = %+v, want the new broker's 3 partitions", st)
		}
		// Ready was False (BrokerUnreachable) while the broker was down,
		// and turns True again with no change to the object.
		te.waitReady(t, ns, "flaky")
		if f := failures(); f != 0 {
			t.Errorf("failures = %d after a good look, want 0", f)
		}
	})

	t.Run("RetentionChangedOnTheBroker", func(t *testing.T) {
		k := consumertest.NewKafka(t)
		if err := k.CreateTopic(ctx, "payments", 1, map[string]string{"retention.ms": retentionMS(day)}); err != nil {
			t.Fatal(err)
		}
		k.MustCreateTopic(t, "payments.dlq", 1)
		te.create(t, newConsumer(ns, "pay", withTable("pay"), withKafka(k.Brokers(), "payments")))
		te.waitReady(t, ns, "pay")
		created := te.waitCondition(t, ns, "pay", kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered)

		// A Kafka admin raises retention.ms above the dedup retention (168h):
		// the periodic check turns the warning False.
		alterTopic(t, k, "payments", "retention.ms", retentionMS(30*day))
		got := te.waitCondition(t, ns, "pay", kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionFalse, kafkav1alpha1.ReasonRetentionShorterThanTopic)
		if got.Status.Topic == nil || got.Status.Topic.Retention != "720h0m0s" {
			t.Errorf("status.topic = %+v, want retention 720h0m0s", got.Status.Topic)
		}
		eventually(t, 10*time.Second, "a Warning Event for the shortened dedup coverage", func() (bool, string) {
			var reasons []string
			for _, e := range te.events(t, ns, "pay") {
				reasons = append(reasons, e.Reason)
			}
			return hasEvent(te.events(t, ns, "pay"), kafkav1alpha1.ReasonRetentionShorterThanTopic), fmt.Sprint(reasons)
		})

		// And back: it clears the same way.
		alterTopic(t, k, "payments", "retention.ms", retentionMS(3*day))
		got = te.waitCondition(t, ns, "pay", kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionTrue, kafkav1alpha1.ReasonRetentionCovered)
		if got.Generation != created.Generation {
			t.Errorf("generation %d -> %d: the object was changed", created.Generation, got.Generation)
		}
		if c := got.GetCondition(kafkav1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("Ready = %+v, want True throughout", c)
		}
		waitConditionSeries(t, ns, "pay", kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionTrue)
	})
}
