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
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// TestPlatformsReleaseUnused: an IdempotentConsumer switched from
// spec.kafka.strimzi to bootstrapServers keeps its KafkaUser (and the
// derived Secret's SCRAM user name) while pods of the former template may
// still run with them: during the rollout, and for the termination grace
// period after it; then the KafkaUser is deleted and the derived Secret
// emptied (a PlatformObjectReleased Event); an Outbox's relay KafkaUser
// likewise. Before, they stayed until the object was deleted: credentials
// nobody used.
func TestPlatformsReleaseUnused(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te, ns, _ := strimziEnv(t, envOptions{})
	ctx := context.Background()
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	te.create(t, newConsumer(ns, "sw", withStrimzi("kc"), withTable("sw_event")))
	eventually(t, 30*time.Second, "the KafkaUser", func() (bool, string) {
		_, err := te.getPlatform(t, strimziUserGVK, ns, "sw")
		return err == nil, fmt.Sprint(err)
	})
	te.secret(t, ns, "sw", map[string]string{"password": "scram"})
	setKafkaUserReady(t, te, ns, "sw", "True")
	depKey := types.NamespacedName{Namespace: ns, Name: "sw-consumer"}
	eventually(t, 30*time.Second, "the consumer Deployment", func() (bool, string) {
		err := te.c.Get(ctx, depKey, &appsv1.Deployment{})
		return err == nil, fmt.Sprint(err)
	})
	derived := func() map[string][]byte {
		var sec corev1.Secret
		if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sw-platform"}, &sec); err != nil {
			t.Fatalf("the derived Secret: %v", err)
		}
		return sec.Data
	}
	if string(derived()["username"]) != "sw" {
		t.Fatalf("derived Secret %v, want the SCRAM user name", derived())
	}
	userExists := func() bool {
		_, err := te.getPlatform(t, strimziUserGVK, ns, "sw")
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	// Switched, rolling out: kept.
	te.deploymentsAvailable.Store(false)
	if err := te.update(t, ns, "sw", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.Strimzi = nil
		o.Spec.Kafka.BootstrapServers = []string{"kafka-0.kafka:9092"}
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the new template applied", func() (bool, string) {
		var dep appsv1.Deployment
		if err := te.c.Get(ctx, depKey, &dep); err != nil {
			return false, err.Error()
		}
		b := envMap(dep.Spec.Template.Spec.Containers[0].Env)["CONSUMER_BROKERS"]
		return b == "kafka-0.kafka:9092", b
	})
	time.Sleep(2 * time.Second)
	if !userExists() || len(derived()) == 0 {
		t.Fatal("the KafkaUser or the derived Secret's values went while the former template's pods may run")
	}

	// Rolled out just now: kept for the termination grace period (45 s).
	setRolledOut := func(depKey types.NamespacedName, at time.Time) {
		t.Helper()
		var dep appsv1.Deployment
		if err := te.c.Get(ctx, depKey, &dep); err != nil {
			t.Fatal(err)
		}
		r := ptr.Deref(dep.Spec.Replicas, 1)
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable",
				LastUpdateTime: metav1.NewTime(at), LastTransitionTime: metav1.NewTime(at)}}}
		if err := te.c.Status().Update(ctx, &dep); err != nil {
			t.Fatal(err)
		}
	}
	setRolledOut(depKey, time.Now())
	time.Sleep(2 * time.Second)
	if !userExists() || len(derived()) == 0 {
		t.Fatal("the KafkaUser or the derived Secret's values went within the termination grace period")
	}

	// The grace over: released.
	setRolledOut(depKey, time.Now().Add(-time.Minute))
	eventually(t, 30*time.Second, "the KafkaUser deleted and the derived Secret emptied", func() (bool, string) {
		u, d := userExists(), derived()
		return !u && len(d) == 0, fmt.Sprintf("KafkaUser exists %v, derived Secret keys %d", u, len(d))
	})
	if !te.hasEvents(t, ns, "sw", ReasonPlatformObjectReleased) {
		t.Errorf("no %s Event", ReasonPlatformObjectReleased)
	}

	// Strimzi added and taken away again while its KafkaUser never got
	// Ready (a Kafka wait skips the release phase, and the platform use is
	// the same before and after): released all the same. (A review found
	// it kept until the operator restarted.)
	te.deploymentsAvailable.Store(true)
	if err := te.update(t, ns, "sw", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.BootstrapServers = nil
		o.Spec.Kafka.Strimzi = &kafkav1alpha1.StrimziSpec{StrimziCluster: kafkav1alpha1.StrimziCluster{Cluster: "kc"}}
	}); err != nil {
		t.Fatal(err)
	}
	te.waitCondition(t, ns, "sw", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaUserNotReady)
	if !userExists() {
		t.Fatal("no KafkaUser made during the wait")
	}
	if err := te.update(t, ns, "sw", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.Strimzi = nil
		o.Spec.Kafka.BootstrapServers = []string{"kafka-0.kafka:9092"}
	}); err != nil {
		t.Fatal(err)
	}
	setRolledOut(depKey, time.Now().Add(-time.Minute))
	eventually(t, 30*time.Second, "the KafkaUser made during the wait deleted", func() (bool, string) {
		u, d := userExists(), derived()
		return !u && len(d) == 0, fmt.Sprintf("KafkaUser exists %v, derived Secret keys %d", u, len(d))
	})

	// The same for an Outbox's relay KafkaUser, and not while the relay's
	// template still names it: switched to brokers with SASL whose Secret
	// does not exist yet (a GitOps ExternalSecret that lags), the relay
	// keeps its former template. (A review found the KafkaUser deleted and
	// the derived Secret emptied under the running relay.)
	te.deploymentsAvailable.Store(true)
	te.create(t, newPlatformOutbox(ns, "osw", outboxStrimzi("kc")))
	eventually(t, 30*time.Second, "the relay's KafkaUser", func() (bool, string) {
		_, err := te.getPlatform(t, strimziUserGVK, ns, "osw-outbox-relay")
		return err == nil, fmt.Sprint(err)
	})
	te.secret(t, ns, "osw-outbox-relay", map[string]string{"password": "scram"})
	setKafkaUserReady(t, te, ns, "osw-outbox-relay", "True")
	relayKey := types.NamespacedName{Namespace: ns, Name: "osw-outbox-relay"}
	var gen int64
	eventually(t, 30*time.Second, "the relay Deployment", func() (bool, string) {
		var dep appsv1.Deployment
		err := te.c.Get(ctx, relayKey, &dep)
		gen = dep.Generation
		return err == nil, fmt.Sprint(err)
	})
	relayDerived := func() map[string][]byte {
		var sec corev1.Secret
		if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "osw-outbox-platform"}, &sec); err != nil {
			t.Fatalf("the relay's derived Secret: %v", err)
		}
		return sec.Data
	}
	if string(relayDerived()["username"]) != "osw-outbox-relay" {
		t.Fatalf("relay's derived Secret %v, want the SCRAM user name", relayDerived())
	}
	te.deploymentsAvailable.Store(false)
	if err := te.updateOutbox(t, ns, "osw", func(o *kafkav1alpha1.Outbox) {
		o.Spec.Kafka.Strimzi = nil
		o.Spec.Kafka.BootstrapServers = []string{"kafka-0.kafka:9092"}
		o.Spec.Kafka.SASL = &kafkav1alpha1.KafkaSASL{Mechanism: kafkav1alpha1.SASLScramSHA512,
			UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: "ext-sasl", Key: "username"},
			PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: "ext-sasl", Key: "password"}}
	}); err != nil {
		t.Fatal(err)
	}
	setRolledOut(relayKey, time.Now().Add(-time.Minute)) // the former template, long rolled out
	time.Sleep(3 * time.Second)
	if _, err := te.getPlatform(t, strimziUserGVK, ns, "osw-outbox-relay"); err != nil || len(relayDerived()) == 0 {
		t.Fatalf("the relay's KafkaUser (%v) or derived Secret (%d keys) went while the relay's template still names them", err, len(relayDerived()))
	}
	te.secret(t, ns, "ext-sasl", map[string]string{"username": "u", "password": "p"})
	eventually(t, 30*time.Second, "the relay's new template applied", func() (bool, string) {
		var dep appsv1.Deployment
		if err := te.c.Get(ctx, relayKey, &dep); err != nil {
			return false, err.Error()
		}
		return dep.Generation > gen, fmt.Sprint(dep.Generation)
	})
	setRolledOut(relayKey, time.Now().Add(-time.Minute))
	eventually(t, 30*time.Second, "the relay's KafkaUser deleted and derived Secret emptied", func() (bool, string) {
		_, err := te.getPlatform(t, strimziUserGVK, ns, "osw-outbox-relay")
		d := relayDerived()
		return apierrors.IsNotFound(err) && len(d) == 0, fmt.Sprintf("%v; derived keys %d", err, len(d))
	})
	if !te.hasEventsOf(t, ns, "Outbox", "osw", ReasonPlatformObjectReleased) {
		t.Errorf("no %s Event on the Outbox", ReasonPlatformObjectReleased)
	}
}
