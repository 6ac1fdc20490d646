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

package objects

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// TestConsumerNameOf: ConsumerNameOf undoes DeploymentName, and names no
// object for a Deployment that no object's name could produce.
func TestConsumerNameOf(t *testing.T) {
	for _, name := range []string{"orders", "a", "orders-consumer", "x-consumer-consumer"} {
		obj := &kafkav1alpha1.IdempotentConsumer{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if got, ok := ConsumerNameOf(DeploymentName(obj)); !ok || got != name {
			t.Errorf("ConsumerNameOf(DeploymentName(%q)) = %q, %v", name, got, ok)
		}
	}
	for _, dep := range []string{"orders", "-consumer", "orders-consumer-x", ""} {
		if got, ok := ConsumerNameOf(dep); ok {
			t.Errorf("ConsumerNameOf(%q) = %q, true; want no object", dep, got)
		}
	}
}
