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
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestIdempotencyKeyRulesAgreeWithTheRuntime: a template the CRD's two
// rules (and its maxLength) accept is one the consumer's
// sink.ParseIdempotencyKey accepts, and the other way round.
func TestIdempotencyKeyRulesAgreeWithTheRuntime(t *testing.T) {
	rules := crdRules(t, "consumer", "sink", "http", "idempotencyKey")
	if len(rules) != 2 {
		t.Fatalf("idempotencyKey has %d CEL rules, want 2", len(rules))
	}
	m := regexp.MustCompile(`^self\.matches\(r'(.*)'\)$`).FindStringSubmatch(rules[0].Rule)
	if m == nil || rules[1].Rule != "self.contains('{eventId}')" {
		t.Fatalf("idempotencyKey rules %q, %q", rules[0].Rule, rules[1].Rule)
	}
	shape := regexp.MustCompile(m[1])
	cel := func(s string) bool { return len(s) <= 200 && shape.MatchString(s) && strings.Contains(s, "{eventId}") }
	for _, tmpl := range []string{
		"{eventId}", "{group}:{eventId}", "{topic}/{group}/{eventId}", "billing-{eventId}", "{eventId}{eventId}", "a~|!z{eventId}",
		"{group}", "", "{partition}:{eventId}", "{eventid}", "{ eventId }", "a b{eventId}", "{eventId}}", "{{eventId}", "é{eventId}",
		"{eventId}\n", strings.Repeat("x", 191) + "{eventId}", strings.Repeat("x", 192) + "{eventId}",
	} {
		_, err := sink.ParseIdempotencyKey(tmpl)
		runtime := err == nil && tmpl != "" // empty is the default at run time; the API leaves the field out instead
		if got := cel(tmpl); got != runtime {
			t.Errorf("%q: the CRD accepts it: %t, the consumer: %v", tmpl, got, err)
		}
	}
}

// TestIdempotencyKeyTemplate: spec.consumer.sink.http.idempotencyKey
// reaches the consumer as CONSUMER_SINK_HTTP_IDEMPOTENCY_KEY; status
// records the template in effect; changing it on a live object is a
// Warning Event and the condition IdempotencyKeyChanged naming both
// templates; the API refuses a template without {eventId} or with an
// unknown placeholder.
func TestIdempotencyKeyTemplate(t *testing.T) {
	te := startEnv(t, envOptions{})
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	te.create(t, newConsumer(ns, "h", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Consumer.Sink = kafkav1alpha1.SinkSpec{Type: kafkav1alpha1.SinkHTTP, HTTP: &kafkav1alpha1.HTTPSinkSpec{URL: "https://provider.example/events"}}
	}))
	got := te.waitReady(t, ns, "h")
	if st := got.Status.IdempotencyKey; st == nil || st.Template != "{eventId}" || st.Previous != "" || st.ChangedTime != nil {
		t.Fatalf("status.idempotencyKey %+v, want the default {eventId}, unchanged", st)
	}
	envOf := func() map[string]string {
		dep := &appsv1.Deployment{}
		if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "h-consumer"}, dep); err != nil {
			t.Fatal(err)
		}
		return envMap(dep.Spec.Template.Spec.Containers[0].Env)
	}
	if v, ok := envOf()[envvars.SinkHTTPIdempotencyKey]; ok {
		t.Errorf("without the field the Deployment sets %s=%q; the consumer's default applies", envvars.SinkHTTPIdempotencyKey, v)
	}
	if c := got.GetCondition(kafkav1alpha1.ConditionIdempotencyKeyChanged); c != nil {
		t.Errorf("condition %s on a new object: %+v", c.Type, c)
	}

	for tmpl, want := range map[string]string{
		"{group}":               "idempotencyKey must contain {eventId}",
		"{partition}:{eventId}": "idempotencyKey may use only the placeholders",
	} {
		err := te.update(t, ns, "h", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer.Sink.HTTP.IdempotencyKey = tmpl })
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("idempotencyKey %q: %v, want Invalid saying %q", tmpl, err, want)
		}
	}

	if err := te.update(t, ns, "h", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Consumer.Sink.HTTP.IdempotencyKey = "{group}:{eventId}"
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the template reaches the Deployment", func() (bool, string) {
		v := envOf()[envvars.SinkHTTPIdempotencyKey]
		return v == "{group}:{eventId}", v
	})
	got = te.waitCondition(t, ns, "h", kafkav1alpha1.ConditionIdempotencyKeyChanged, metav1.ConditionTrue, kafkav1alpha1.ReasonIdempotencyKeyChanged)
	c := got.GetCondition(kafkav1alpha1.ConditionIdempotencyKeyChanged)
	if !strings.Contains(c.Message, `"{eventId}"`) || !strings.Contains(c.Message, `"{group}:{eventId}"`) || !strings.Contains(c.Message, "applies it again") {
		t.Errorf("condition message %q does not name both templates and the consequence", c.Message)
	}
	if st := got.Status.IdempotencyKey; st == nil || st.Template != "{group}:{eventId}" || st.Previous != "{eventId}" || st.ChangedTime == nil {
		t.Errorf("status.idempotencyKey %+v", st)
	}
	// A warning, not a failure: the object becomes Ready with it.
	got = te.waitReady(t, ns, "h")
	if c := got.GetCondition(kafkav1alpha1.ConditionIdempotencyKeyChanged); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("IdempotencyKeyChanged after the rollout: %+v", c)
	}
	eventually(t, 30*time.Second, "a Warning Event", func() (bool, string) {
		for _, ev := range te.events(t, ns, "h") {
			if ev.Reason == kafkav1alpha1.ReasonIdempotencyKeyChanged && ev.Type == "Warning" {
				return true, ev.Note
			}
		}
		return false, "none"
	})
}
