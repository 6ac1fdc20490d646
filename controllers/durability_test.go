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
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestDatabaseDurableCondition: a database that acknowledges commits it can
// lose (here synchronous_commit=off for the operator's session, set through
// the URL) shows DatabaseDurable=False with the risk as reason and a Warning
// Event, and stays Ready; a default one shows DatabaseDurable=True.
func TestDatabaseDurableCondition(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{})
	dbURL := consumertest.DatabaseURL(t)

	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	te.create(t, newConsumer(ns, "durable", withTable("durable_event")))
	got := te.waitCondition(t, ns, "durable", kafkav1alpha1.ConditionDatabaseDurable, metav1.ConditionTrue, kafkav1alpha1.ReasonDurable)
	if c := meta.FindStatusCondition(got.Status.Conditions, kafkav1alpha1.ConditionDatabaseDurable); !strings.Contains(c.Message, "synchronous_commit=on") {
		t.Errorf("DatabaseDurable message %q does not name synchronous_commit=on", c.Message)
	}

	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("synchronous_commit", "off") // a run-time parameter of the operator's session
	u.RawQuery = q.Encode()
	ns2 := te.namespace(t)
	te.secret(t, ns2, "db", map[string]string{"url": u.String()})
	te.create(t, newConsumer(ns2, "lossy", withTable("lossy_event")))
	got = te.waitCondition(t, ns2, "lossy", kafkav1alpha1.ConditionDatabaseDurable, metav1.ConditionFalse, dedup.RiskSynchronousCommitOff)
	c := meta.FindStatusCondition(got.Status.Conditions, kafkav1alpha1.ConditionDatabaseDurable)
	if !strings.Contains(c.Message, "synchronous_commit is off") || !strings.Contains(c.Message, "redoes lost batches") {
		t.Errorf("DatabaseDurable message %q does not explain the risk and the repair", c.Message)
	}
	if strings.Contains(c.Message, consumertest.SharedPostgres(t).Password()) {
		t.Error("DatabaseDurable message holds the database password")
	}
	te.waitReady(t, ns2, "lossy") // a warning only
	eventually(t, 30*time.Second, "a SynchronousCommitOff Warning Event", func() (bool, string) {
		evs := te.events(t, ns2, "lossy")
		return hasEvent(evs, dedup.RiskSynchronousCommitOff), ""
	})
}
