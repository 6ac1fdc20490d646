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
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestOutboxDurabilityCondition: an outbox's DatabaseDurable ignores the
// operator's synchronous_commit (the emit function commits with on) and is
// False only for standbys a commit does not wait for, naming the phantom
// event a failover can leave and the fix.
func TestOutboxDurabilityCondition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      dedup.Durability
		status metav1.ConditionStatus
		reason string
		names  []string
	}{
		{"NoStandbySyncCommitOff", dedup.Durability{SynchronousCommit: "off"}, metav1.ConditionTrue, kafkav1alpha1.ReasonDurable, []string{"synchronous_commit on", "0 standby"}},
		{"AsyncStandby", dedup.Durability{SynchronousCommit: "on", Standbys: []dedup.Standby{{Name: "pg-2", SyncState: "async"}}},
			metav1.ConditionFalse, dedup.RiskAsyncStandby, []string{"pg-2", "synchronous_standby_names is empty", "failover", "spec.postgresql.synchronous"}},
		{"SyncStandbyOperatorLocal", dedup.Durability{SynchronousCommit: "local", SynchronousStandbyNames: "pg-2", Standbys: []dedup.Standby{{Name: "pg-2", SyncState: "sync"}}},
			metav1.ConditionTrue, kafkav1alpha1.ReasonDurable, []string{"1 standby"}},
		{"PotentialStandby", dedup.Durability{SynchronousCommit: "on", SynchronousStandbyNames: "pg-2", Standbys: []dedup.Standby{{Name: "pg-2", SyncState: "sync"}, {Name: "pg-3", SyncState: "potential"}}},
			metav1.ConditionFalse, dedup.RiskAsyncStandby, []string{"pg-3"}},
	} {
		status, reason, msg := outboxDurabilityCondition(tc.d)
		if status != tc.status || reason != tc.reason {
			t.Errorf("%s: %s/%s (%s), want %s/%s", tc.name, status, reason, msg, tc.status, tc.reason)
		}
		for _, n := range tc.names {
			if !strings.Contains(msg, n) {
				t.Errorf("%s: message %q does not name %q", tc.name, msg, n)
			}
		}
	}
}
