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
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// appArmorUnconfined is a pod template annotation that the baseline (and so
// the restricted) Pod Security profile forbids, and one of the few things a
// user can break the profile with through spec.consumer.podTemplate.
const appArmorUnconfined = "container.apparmor.security.beta.kubernetes.io/" + objects.ConsumerContainer

// restrictedNamespace creates a namespace that enforces the restricted Pod
// Security profile.
func (te *testEnv) restrictedNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "psa-" + randSuffix(), Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	if err := te.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// TestPodSecurity has the API server's Pod Security admission judge the
// consumer pods: those the operator builds are admitted under the restricted
// profile, and an override that breaks it is reported as a condition
// instead of being applied.
func TestPodSecurity(t *testing.T) {
	te := startEnv(t, envOptions{})
	ctx := context.Background()
	ns := te.restrictedNamespace(t)

	// Without this, the admissions below would prove nothing.
	t.Run("AdmissionEnforces", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		err := te.c.Create(ctx, pod)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") {
			t.Fatalf("a pod with no securityContext in a restricted namespace: err = %v, want Forbidden by PodSecurity", err)
		}
	})

	t.Run("BuiltPodsAdmitted", func(t *testing.T) {
		ref := func(name, key string) *kafkav1alpha1.SecretKeyRef {
			return &kafkav1alpha1.SecretKeyRef{Name: name, Key: key}
		}
		for name, mod := range map[string]func(*kafkav1alpha1.IdempotentConsumer){
			"log-sink": func(*kafkav1alpha1.IdempotentConsumer) {},
			"http-sink-tls-sasl": func(o *kafkav1alpha1.IdempotentConsumer) {
				o.Spec.Consumer.Sink = kafkav1alpha1.SinkSpec{Type: kafkav1alpha1.SinkHTTP, HTTP: &kafkav1alpha1.HTTPSinkSpec{
					URL: "https://payments.example/charge", AuthorizationSecretRef: ref("sink", "token")}}
				o.Spec.Kafka.TLS = &kafkav1alpha1.KafkaTLS{CASecretRef: ref("kafka-ca", "ca.crt"),
					ClientCertSecretRef: ref("kafka-client", "tls.crt"), ClientKeySecretRef: ref("kafka-client", "tls.key")}
				o.Spec.Kafka.SASL = &kafkav1alpha1.KafkaSASL{Mechanism: kafkav1alpha1.SASLScramSHA512,
					UsernameSecretRef: *ref("kafka-user", "username"), PasswordSecretRef: *ref("kafka-user", "password")}
			},
			"overrides-within-profile": func(o *kafkav1alpha1.IdempotentConsumer) {
				o.Spec.Consumer.Env = []corev1.EnvVar{{Name: "EXTRA", Value: "1"}}
				o.Spec.Consumer.PodTemplate = &kafkav1alpha1.PodTemplateOverrides{
					Labels:             map[string]string{"team": "payments"},
					Annotations:        map[string]string{appArmorUnconfined: "runtime/default"},
					ServiceAccountName: "consumer",
					NodeSelector:       map[string]string{"pool": "consumers"},
					Tolerations:        []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
					PriorityClassName:  "",
				}
			},
		} {
			obj := newConsumer(ns, name, mod)
			obj.UID = types.UID("00000000-0000-0000-0000-" + randSuffix() + "0000")
			pod := objects.PodFromTemplate(objects.Deployment(obj, objects.Options{ConfigHash: "0123"}))
			if err := te.c.Create(ctx, pod); err != nil {
				t.Errorf("%s: the API server refuses the consumer pod in a restricted namespace: %v", name, err)
				continue
			}
			if err := te.c.Delete(ctx, pod); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("OverrideRejected", func(t *testing.T) {
		te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
		unconfined := func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Consumer.PodTemplate = &kafkav1alpha1.PodTemplateOverrides{Annotations: map[string]string{appArmorUnconfined: "unconfined"}}
		}
		te.create(t, newConsumer(ns, "unconfined", withTable("unconfined_event"), unconfined))
		got := te.waitCondition(t, ns, "unconfined", kafkav1alpha1.ConditionConsumerReady, metav1.ConditionFalse, ReasonPodSecurityRejected)
		assertRefusal(t, got)
		depKey := types.NamespacedName{Namespace: ns, Name: objects.DeploymentName(got)}
		if err := te.c.Get(ctx, depKey, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment of a refused template: err = %v, want NotFound (not created)", err)
		}
		if !te.hasEvents(t, ns, "unconfined", ReasonPodSecurityRejected) {
			t.Errorf("no %s Event", ReasonPodSecurityRejected)
		}

		// Fixed: the Deployment is created and the object gets Ready.
		if err := te.update(t, ns, "unconfined", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.PodTemplate = nil }); err != nil {
			t.Fatal(err)
		}
		te.waitReady(t, ns, "unconfined")
		dep := &appsv1.Deployment{}
		if err := te.c.Get(ctx, depKey, dep); err != nil {
			t.Fatal(err)
		}
		applied := dep.Annotations[objects.AnnotationSpecHash]

		// Broken again, with a Deployment running: it keeps its template.
		if err := te.update(t, ns, "unconfined", unconfined); err != nil {
			t.Fatal(err)
		}
		got = te.waitCondition(t, ns, "unconfined", kafkav1alpha1.ConditionConsumerReady, metav1.ConditionFalse, ReasonPodSecurityRejected)
		assertRefusal(t, got)
		time.Sleep(500 * time.Millisecond)
		if err := te.c.Get(ctx, depKey, dep); err != nil {
			t.Fatal(err)
		}
		if dep.Annotations[objects.AnnotationSpecHash] != applied || dep.Spec.Template.Annotations[appArmorUnconfined] != "" {
			t.Errorf("the refused template was applied: spec hash %s (was %s), pod annotations %v",
				dep.Annotations[objects.AnnotationSpecHash], applied, dep.Spec.Template.Annotations)
		}
	})
}

// TestPodSecurityOutboxRelay: the relay pods the operator builds for an
// Outbox are admitted under the restricted profile, and an override that
// breaks it is RelayReady=False/PodSecurityRejected instead of a Deployment
// whose ReplicaSet fails silently; a running relay keeps its template.
func TestPodSecurityOutboxRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{options: Options{KafkaTimeout: 2 * time.Second}})
	ctx := context.Background()
	ns := te.restrictedNamespace(t)
	relayAppArmor := "container.apparmor.security.beta.kubernetes.io/" + objects.RelayContainer

	t.Run("BuiltPodsAdmitted", func(t *testing.T) {
		ob := newOutbox(ns, "admitted", []string{"localhost:9092"}, "orders")
		ob.UID = types.UID("00000000-0000-0000-0000-" + randSuffix() + "0000")
		ob.Spec.Relay.PodTemplate = &kafkav1alpha1.PodTemplateOverrides{
			Labels:      map[string]string{"team": "shop"},
			Annotations: map[string]string{relayAppArmor: "runtime/default"},
		}
		pod := objects.PodFromTemplate(objects.RelayDeployment(ob, objects.Options{ConfigHash: "0123"}))
		if err := te.c.Create(ctx, pod); err != nil {
			t.Fatalf("the API server refuses the outbox relay pod in a restricted namespace: %v", err)
		}
		if err := te.c.Delete(ctx, pod); err != nil {
			t.Error(err)
		}
	})

	t.Run("OverrideRejected", func(t *testing.T) {
		te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
		k := consumertest.NewKafka(t)
		k.MustCreateTopic(t, "orders", 1)
		ob := newOutbox(ns, "unconfined", k.Brokers(), "orders")
		ob.Spec.Relay.PodTemplate = &kafkav1alpha1.PodTemplateOverrides{Annotations: map[string]string{relayAppArmor: "unconfined"}}
		te.create(t, ob)
		o := te.waitOutbox(t, ns, "unconfined", kafkav1alpha1.ConditionRelayReady, metav1.ConditionFalse, ReasonPodSecurityRejected,
			`violates PodSecurity "restricted:latest"`, "AppArmor", "outbox relay pods")
		if r := o.GetCondition(kafkav1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != ReasonPodSecurityRejected {
			t.Errorf("Ready with a refused relay template: %s", outboxConditions(o))
		}
		depKey := types.NamespacedName{Namespace: ns, Name: objects.RelayDeploymentName(o)}
		if err := te.c.Get(ctx, depKey, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Errorf("relay Deployment of a refused template: err = %v, want NotFound (not created)", err)
		}

		// Fixed: the Deployment is made.
		setTemplate := func(pt *kafkav1alpha1.PodTemplateOverrides) {
			t.Helper()
			if err := te.updateOutbox(t, ns, "unconfined", func(o *kafkav1alpha1.Outbox) {
				o.Spec.Relay.PodTemplate = pt
			}); err != nil {
				t.Fatal(err)
			}
		}
		setTemplate(nil)
		dep := &appsv1.Deployment{}
		eventually(t, 30*time.Second, "the relay Deployment", func() (bool, string) {
			if err := te.c.Get(ctx, depKey, dep); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		applied := dep.Annotations[objects.AnnotationSpecHash]

		// Broken again, with a Deployment running: it keeps its template.
		setTemplate(&kafkav1alpha1.PodTemplateOverrides{Annotations: map[string]string{relayAppArmor: "unconfined"}})
		te.waitOutbox(t, ns, "unconfined", kafkav1alpha1.ConditionRelayReady, metav1.ConditionFalse, ReasonPodSecurityRejected, "AppArmor")
		time.Sleep(500 * time.Millisecond)
		if err := te.c.Get(ctx, depKey, dep); err != nil {
			t.Fatal(err)
		}
		if dep.Annotations[objects.AnnotationSpecHash] != applied || dep.Spec.Template.Annotations[relayAppArmor] != "" {
			t.Errorf("the refused relay template was applied: spec hash %s (was %s), pod annotations %v",
				dep.Annotations[objects.AnnotationSpecHash], applied, dep.Spec.Template.Annotations)
		}
	})
}

func assertRefusal(t *testing.T, obj *kafkav1alpha1.IdempotentConsumer) {
	t.Helper()
	c := obj.GetCondition(kafkav1alpha1.ConditionConsumerReady)
	if !strings.Contains(c.Message, `violates PodSecurity "restricted:latest"`) || !strings.Contains(c.Message, "AppArmor") {
		t.Errorf("ConsumerReady message %q: want the API server's Pod Security reason (restricted, AppArmor)", c.Message)
	}
	if r := obj.GetCondition(kafkav1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse {
		t.Errorf("Ready with a refused template: %s", conditionsSummary(obj))
	}
}
