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
	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// event emits a Kubernetes Event (events.k8s.io/v1) about obj. Callers pass
// messages already scrubbed of secrets; the note is passed as an argument,
// never as a format string.
func (r *IdempotentConsumerReconciler) event(obj *kafkav1alpha1.IdempotentConsumer, eventType, reason, action, note string) {
	if r.Recorder == nil {
		return
	}
	const maxNote = 1024 // the API server refuses longer notes
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.Recorder.Eventf(obj, nil, eventType, reason, action, "%s", note)
}
