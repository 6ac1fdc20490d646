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
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestPodsReleased: without a Progressing condition (a paused Deployment,
// progressDeadlineSeconds at its maximum) the grace counts from when the
// rollout was first seen done, not from the epoch (a review found old pods
// still draining released at once).
func TestPodsReleased(t *testing.T) {
	now := time.Now()
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(45))}}},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1},
	}
	if wait, ok := podsReleased(dep, now, now); ok || wait != 45*time.Second {
		t.Errorf("no condition, first seen now: ok %v wait %v, want a 45s wait", ok, wait)
	}
	if _, ok := podsReleased(dep, now, now.Add(-time.Minute)); !ok {
		t.Error("no condition, first seen a minute ago: not released")
	}
	dep.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Reason: "NewReplicaSetAvailable", LastUpdateTime: metav1.NewTime(now.Add(-10 * time.Second))}}
	if wait, ok := podsReleased(dep, now, now.Add(-time.Hour)); ok || wait != 35*time.Second {
		t.Errorf("rollout done 10s ago: ok %v wait %v, want 35s more", ok, wait)
	}
	dep.Status.ObservedGeneration = 1
	if _, ok := podsReleased(dep, now, now.Add(-time.Hour)); ok {
		t.Error("a generation not yet observed counts as rolled out")
	}
	// No Deployment (deleted in the same edit, perhaps): its pods may still
	// drain (a review found the release at once).
	if wait, ok := podsReleased(nil, now, now); ok || wait != 45*time.Second {
		t.Errorf("no Deployment, first seen gone now: ok %v wait %v, want a 45s wait", ok, wait)
	}
	if _, ok := podsReleased(nil, now, now.Add(-time.Minute)); !ok {
		t.Error("no Deployment for a minute: not released")
	}
}

// TestTemplateSecretUses: every way a pod template reads a Secret.
func TestTemplateSecretUses(t *testing.T) {
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "whole"}}}}}},
		Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "U", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "d"}, Key: "username"}}}}}},
		Volumes: []corev1.Volume{
			{Name: "a", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol"}}},
			{Name: "b", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca"}}}}}}}},
		},
	}
	u := templateSecretUses(spec)
	for _, c := range []struct {
		name, key string
		want      bool
	}{
		{"whole", "anything", true}, {"d", "username", true}, {"d", "uri", false}, {"d", "", true},
		{"vol", "x", true}, {"proj", "ca.crt", true}, {"proj", "tls.key", false}, {"other", "", false},
	} {
		if got := u.uses(c.name, c.key); got != c.want {
			t.Errorf("uses(%q, %q) = %v, want %v", c.name, c.key, got, c.want)
		}
	}
}

// TestReleaseChecksKeepTheWait: an object that uses a platform is looked at
// again on every reconcile (forget), and the time its Deployment was first
// seen rolled out (or gone) survives that, so a wait counted from it ends;
// a new rollout and the object's deletion reset it.
func TestReleaseChecksKeepTheWait(t *testing.T) {
	obj := newConsumer("ns", "c")
	p := consumerPlatform(obj)
	var rc releaseChecks
	t0 := time.Now()
	if got := rc.rolledOutSince(p, t0); !got.Equal(t0) {
		t.Fatalf("first sight %v, want %v", got, t0)
	}
	rc.forget(releaseKey(p))
	if !rc.due(p) {
		t.Error("not due after forget")
	}
	if got := rc.rolledOutSince(p, t0.Add(time.Minute)); !got.Equal(t0) {
		t.Errorf("after forget the first sight is %v, want %v kept (the wait would restart on every reconcile)", got, t0)
	}
	rc.clear(p)
	if rc.due(p) {
		t.Error("due right after clear with the same use")
	}
	rc.notRolledOut(p)
	if got := rc.rolledOutSince(p, t0.Add(2*time.Minute)); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("after a new rollout the first sight is %v, want reset", got)
	}
	rc.drop(releaseKey(p))
	if !rc.due(p) {
		t.Error("not due after drop")
	}
}
