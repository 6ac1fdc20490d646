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
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// kafkaReadyWithin is what issue 33 promises: a Kafka problem shows in Ready
// within it, and Ready turns True within it of the problem being fixed.
const kafkaReadyWithin = 30 * time.Second

// TestKafkaReadyNamesTheFix runs consumer objects against a real broker
// (kfake) with the production topic backoff (Options left at their
// defaults): a missing topic, a missing <topic>.dlq and a wrong broker
// address each turn Ready False with their own reason, naming the topic or
// the address, and creating the topics later turns the object Ready with no
// change to it. A table-only object reports the missing topic in KafkaReady
// and stays Ready.
func TestKafkaReadyNamesTheFix(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{realClock: true, options: Options{KafkaTimeout: 2 * time.Second}})
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	k := consumertest.NewKafka(t)

	// waitFor waits up to kafkaReadyWithin for condType with that status and
	// reason whose message names every word of names, and returns the
	// condition.
	waitFor := func(t *testing.T, name, condType string, status metav1.ConditionStatus, reason string, names ...string) *metav1.Condition {
		t.Helper()
		start := time.Now()
		var got *metav1.Condition
		eventually(t, kafkaReadyWithin, fmt.Sprintf("%s %s=%s/%s naming %q", name, condType, status, reason, names), func() (bool, string) {
			obj := te.get(t, ns, name)
			got = meta.FindStatusCondition(obj.Status.Conditions, condType)
			if got == nil || got.Status != status || got.Reason != reason || got.ObservedGeneration != obj.Generation {
				return false, conditionsSummary(obj)
			}
			for _, n := range names {
				if !strings.Contains(got.Message, n) {
					return false, conditionsSummary(obj)
				}
			}
			return true, ""
		})
		t.Logf("%s: %s=%s/%s after %s: %s", name, condType, status, reason, time.Since(start).Round(10*time.Millisecond), got.Message)
		return got
	}
	// noneTrueWithProblem: no condition is True while its message reports a
	// missing topic or an unreachable broker (but Reconciling and Stalled,
	// whose True is the problem: kstatus's abnormal-true conditions).
	noneTrueWithProblem := func(t *testing.T, name string) {
		t.Helper()
		obj := te.get(t, ns, name)
		for _, c := range obj.Status.Conditions {
			if c.Type == kafkav1alpha1.ConditionReconciling || c.Type == kafkav1alpha1.ConditionStalled {
				continue
			}
			if c.Status == metav1.ConditionTrue && (strings.Contains(c.Message, "does not exist") || strings.Contains(c.Message, "Cannot reach")) {
				t.Errorf("%s: %s is True and reports a problem: %s", name, c.Type, c.Message)
			}
		}
	}

	t.Run("TopicMissingThenCreated", func(t *testing.T) {
		te.create(t, newConsumer(ns, "late", withTable("late"), withKafka(k.Brokers(), "late-orders")))
		waitFor(t, "late", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTopicNotFound, `"late-orders"`)
		waitFor(t, "late", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTopicNotFound, `"late-orders"`)
		noneTrueWithProblem(t, "late")
		// The Deployment is made anyway, so the consumer starts when the
		// topic appears.
		waitFor(t, "late", kafkav1alpha1.ConditionConsumerReady, metav1.ConditionTrue, kafkav1alpha1.ReasonDeploymentAvailable)

		// The topic, not its dead-letter topic.
		k.MustCreateTopic(t, "late-orders", 2)
		waitFor(t, "late", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDeadLetterTopicNotFound, `"late-orders.dlq"`)
		waitFor(t, "late", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDeadLetterTopicNotFound, `"late-orders.dlq"`)
		noneTrueWithProblem(t, "late")

		// And the dead-letter topic: Ready, untouched.
		gen := te.get(t, ns, "late").Generation
		k.MustCreateTopic(t, "late-orders.dlq", 1)
		waitFor(t, "late", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
		waitFor(t, "late", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionTrue, kafkav1alpha1.ReasonTopicsFound, `"late-orders"`, `"late-orders.dlq"`)
		if got := te.get(t, ns, "late").Generation; got != gen {
			t.Errorf("generation %d, want %d: the object was changed", got, gen)
		}
		noneTrueWithProblem(t, "late")
	})

	t.Run("WrongBroker", func(t *testing.T) {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		te.create(t, newConsumer(ns, "wrong", withTable("wrong"), withKafka([]string{addr}, "orders")))
		waitFor(t, "wrong", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonBrokerUnreachable, addr)
		waitFor(t, "wrong", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonBrokerUnreachable, addr)
		noneTrueWithProblem(t, "wrong")

		// Pointed at the right broker (a spec change), with both topics.
		k.MustCreateTopic(t, "orders", 1)
		k.MustCreateTopic(t, "orders.dlq", 1)
		if err := te.update(t, ns, "wrong", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Kafka.BootstrapServers = k.Brokers() }); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "wrong", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
	})

	t.Run("DeadLetterTopicMissing", func(t *testing.T) {
		k.MustCreateTopic(t, "nodlq", 1)
		te.create(t, newConsumer(ns, "nodlq", withTable("nodlq"), withKafka(k.Brokers(), "nodlq")))
		waitFor(t, "nodlq", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDeadLetterTopicNotFound, `"nodlq.dlq"`)
		noneTrueWithProblem(t, "nodlq")
		k.MustCreateTopic(t, "nodlq.dlq", 1)
		waitFor(t, "nodlq", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
	})

	t.Run("TableOnly", func(t *testing.T) {
		obj := newConsumer(ns, "tableonly", withTable("tableonly"), withKafka(k.Brokers(), "nosuchtopic"))
		obj.Spec.Consumer = kafkav1alpha1.ConsumerSpec{}
		te.create(t, obj)
		waitFor(t, "tableonly", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTopicNotFound, `"nosuchtopic"`)
		te.waitReady(t, ns, "tableonly")
		noneTrueWithProblem(t, "tableonly")
	})
}
