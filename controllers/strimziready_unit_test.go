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

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A KafkaUser Ready for an older spec (the ACLs of a topic just added not
// yet applied) is not ready: the relay would meet authorization errors.
func TestStrimziReady_WantsTheCurrentGeneration(t *testing.T) {
	user := func(generation int64, status map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
		u.SetGeneration(generation)
		return u
	}
	ready := []any{map[string]any{"type": "Ready", "status": "True"}}
	for _, c := range []struct {
		name string
		u    *unstructured.Unstructured
		want bool
	}{
		{"ready for this generation", user(2, map[string]any{"observedGeneration": int64(2), "conditions": ready}), true},
		{"ready for the previous generation", user(3, map[string]any{"observedGeneration": int64(2), "conditions": ready}), false},
		{"no observedGeneration: by the condition", user(3, map[string]any{"conditions": ready}), true},
		{"not ready", user(1, map[string]any{"observedGeneration": int64(1), "conditions": []any{map[string]any{"type": "Ready", "status": "False"}}}), false},
		{"no status", user(1, nil), false},
	} {
		if got := strimziReady(c.u); got != c.want {
			t.Errorf("%s: strimziReady = %v, want %v", c.name, got, c.want)
		}
	}
}
