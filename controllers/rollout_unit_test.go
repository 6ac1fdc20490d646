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
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/controllers/objects"
)

func TestParseMaxConcurrentTemplateUpgrades(t *testing.T) {
	for _, c := range []struct {
		in    string
		ok    bool
		slots map[int]int // total Deployments -> slots
	}{
		{"5", true, map[int]int{0: 5, 3: 5, 1000: 5}},
		{"0", true, map[int]int{10: 0}},
		{"10%", true, map[int]int{0: 0, 1: 1, 10: 1, 11: 2, 1000: 100}},
		{"100%", true, map[int]int{7: 7}},
		{"0%", true, map[int]int{100: 0}},
		{" 3 ", true, map[int]int{1: 3}},
		{"-1", false, nil},
		{"101%", false, nil},
		{"ten", false, nil},
		{"5.5%", false, nil},
		{"%", false, nil},
		{"", false, nil},
	} {
		v, err := ParseMaxConcurrentTemplateUpgrades(c.in)
		if (err == nil) != c.ok {
			t.Errorf("%q: err = %v, want ok %t", c.in, err, c.ok)
			continue
		}
		g := newTemplateGate(v, nil)
		for total, want := range c.slots {
			if got := g.slots(total); got != want {
				t.Errorf("%q of %d Deployments = %d slots, want %d", c.in, total, got, want)
			}
		}
	}
}

func TestOperatorCaused(t *testing.T) {
	obj := newConsumer("ns", "c")
	obj.Generation, obj.Status.ObservedGeneration = 3, 3
	dep := func(templateHash, configHash string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if templateHash != "" {
			d.Annotations[AnnotationTemplateHash] = templateHash
		}
		d.Annotations[objects.AnnotationSpecHash] = "spec-" + templateHash + configHash
		d.Spec.Template.Annotations = map[string]string{objects.AnnotationConfigHash: configHash}
		return d
	}
	desired := dep("new", "cfg")
	legacySame := dep("", "cfg")
	legacySame.Annotations[objects.AnnotationSpecHash] = desired.Annotations[objects.AnnotationSpecHash]
	for _, c := range []struct {
		name    string
		mod     func(o *kafkav1alpha1.IdempotentConsumer)
		current *appsv1.Deployment
		want    bool
	}{
		{"no Deployment yet", nil, nil, false},
		{"same template", nil, dep("new", "cfg"), false},
		{"the builder changed", nil, dep("old", "cfg"), true},
		{"made by a release without the hash", nil, dep("", "cfg"), true},
		{"made by a release without the hash, nothing to apply", nil, legacySame, false},
		{"a Secret changed", nil, dep("old", "cfg0"), false},
		{"the spec changed", func(o *kafkav1alpha1.IdempotentConsumer) { o.Generation = 4 }, dep("old", "cfg"), false},
		{"the last template was refused", func(o *kafkav1alpha1.IdempotentConsumer) {
			o.SetCondition(kafkav1alpha1.ConditionConsumerReady, metav1.ConditionFalse, ReasonPodSecurityRejected, "refused")
		}, dep("old", "cfg"), false},
	} {
		o := obj.DeepCopy()
		if c.mod != nil {
			c.mod(o)
		}
		if got := operatorCaused(o, c.current, desired, func(a, b string) bool { return a == b }); got != c.want {
			t.Errorf("%s: operatorCaused = %t, want %t", c.name, got, c.want)
		}
	}

	// The upgrade to the keyed config hash: a Deployment of the release
	// before carries the unkeyed hash of the same values; the new hash is
	// the operator's change, paced by the bound, not a rotated Secret.
	key := make([]byte, 32)
	values := []secretValue{{ref: kafkav1alpha1.SecretKeyRef{Name: "db", Key: "url"}, value: "postgres://u:p@db/app"}}
	same := func(a, b string) bool { return sameSecretValues(key, a, b, values) }
	keyed := dep("new", configHash(key, values))
	if !operatorCaused(obj, dep("", unkeyedConfigHash(values)), keyed, same) {
		t.Error("the unkeyed hash of unchanged values is not the operator's change: the upgrade would roll every consumer at once")
	}
	rotated := []secretValue{{ref: values[0].ref, value: "postgres://u:q@db/app"}}
	if operatorCaused(obj, dep("", unkeyedConfigHash(rotated)), keyed, same) {
		t.Error("a Secret rotated under the unkeyed hash counts as the operator's change: it would wait for a slot")
	}
}

func TestUpgrading(t *testing.T) {
	dep := func(mark, hash string, gen, observed int64, updated, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: gen, Annotations: map[string]string{AnnotationTemplateUpgrade: mark, AnnotationTemplateHash: hash}},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(int32(2))},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: 2, UpdatedReplicas: updated, AvailableReplicas: available},
		}
	}
	for _, c := range []struct {
		name string
		d    *appsv1.Deployment
		want bool
	}{
		{"not observed yet", dep("h", "h", 2, 1, 2, 2), true},
		{"one replica updated", dep("h", "h", 2, 2, 1, 2), true},
		{"updated, not available", dep("h", "h", 2, 2, 2, 1), true},
		{"rolled out", dep("h", "h", 2, 2, 2, 2), false},
		{"no upgrade mark", dep("", "h", 2, 1, 0, 0), false},
		{"a later template (spec change) replaced the upgrade", dep("h", "h2", 3, 2, 0, 0), false},
	} {
		if got := upgrading(c.d); got != c.want {
			t.Errorf("%s: upgrading = %t, want %t", c.name, got, c.want)
		}
	}
}
