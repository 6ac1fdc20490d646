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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/outbox"
)

// TestPlatformsOutboxRetiringTopicKeepsItsACL: a topic removed from an
// Outbox's spec.kafka.topics (Strimzi) while an event for it is still
// unpublished keeps its ACL in the relay's KafkaUser (status.retiringTopics)
// until the relay has published that event; the emit function refuses new
// events to it at once (the table's topic check); then the ACL goes. A
// topic named again before it retires leaves the list, its ACL kept.
// (Before, the ACL went at once and the relay's stream was held at that
// event by TopicAuthorizationFailed.)
func TestPlatformsOutboxRetiringTopicKeepsItsACL(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te, ns, _ := strimziEnv(t, envOptions{realClock: true, options: Options{KafkaTimeout: time.Second}})
	ctx := context.Background()
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	te.create(t, newPlatformOutbox(ns, "rt", outboxStrimzi("kc"), func(o *kafkav1alpha1.Outbox) {
		o.Spec.Kafka.Topics = []string{"orders", "payments"}
	}))
	aclsOf := func() []string {
		u, err := te.getPlatform(t, strimziUserGVK, ns, "rt-outbox-relay")
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		return aclTopics(u)
	}
	eventually(t, 30*time.Second, "the KafkaUser granting both topics", func() (bool, string) {
		got := aclsOf()
		return slices.Equal(got, []string{"orders", "payments"}), fmt.Sprint(got)
	})
	te.secret(t, ns, "rt-outbox-relay", map[string]string{"password": "pw"})
	setKafkaUserReady(t, te, ns, "rt-outbox-relay", "True")

	tbl := outbox.Table{Schema: "public", Name: "rt_outbox"}
	conn := pgConn(t, dbURL)
	emit := func(topic string) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := outbox.Emit(ctx, tx, tbl, outbox.Message{Topic: topic, Key: []byte("k"), Payload: []byte(`{}`)})
			return err
		})
	}
	eventually(t, 30*time.Second, "the outbox table made", func() (bool, string) {
		err := emit("payments")
		return err == nil, fmt.Sprint(err)
	})

	// Removed with an event unpublished: the ACL stays, the list says why.
	if err := te.updateOutbox(t, ns, "rt", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.Topics = []string{"orders"} }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "payments retiring, its until read", func() (bool, string) {
		o := te.getOutbox(t, ns, "rt")
		rt := o.Status.RetiringTopics
		return o.Status.ObservedGeneration == o.Generation && len(rt) == 1 && rt[0].Name == "payments" && rt[0].Until != "",
			fmt.Sprintf("retiringTopics %+v; %s", rt, outboxConditions(o))
	})
	if got := aclsOf(); !slices.Equal(got, []string{"orders", "payments"}) {
		t.Errorf("KafkaUser ACL topics %v while an event for payments is unpublished, want orders and payments", got)
	}
	if err := emit("payments"); err == nil || !strings.Contains(err.Error(), "payments") {
		t.Errorf("an event to the removed topic: %v, want a refusal", err)
	}
	if !te.hasEventsOf(t, ns, "Outbox", "rt", ReasonOutboxTopicRetiring) {
		t.Errorf("no %s Event", ReasonOutboxTopicRetiring)
	}
	time.Sleep(3 * time.Second) // reconciles go on (StatsInterval 1s); nothing is published
	if got := aclsOf(); !slices.Equal(got, []string{"orders", "payments"}) {
		t.Errorf("KafkaUser ACL topics %v later, still unpublished: want orders and payments", got)
	}

	// A relay publishes it (here in process, to a test broker): the topic
	// is retired and its ACL goes.
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "orders", 1)
	k.MustCreateTopic(t, "payments", 1)
	cc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(outbox.Config{Table: tbl, ConnConfig: cc, Brokers: k.Brokers(), PollInterval: 50 * time.Millisecond,
		PublishTimeout: time.Second, TakeoverDelay: 2100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	defer func() { cancel(); t.Logf("relay stopped: %v", <-done) }()
	eventually(t, 60*time.Second, "payments retired and its ACL gone", func() (bool, string) {
		o := te.getOutbox(t, ns, "rt")
		got := aclsOf()
		return len(o.Status.RetiringTopics) == 0 && slices.Equal(got, []string{"orders"}),
			fmt.Sprintf("retiringTopics %+v, ACL topics %v, backlog %v, cursor %+v", o.Status.RetiringTopics, got, o.Status.Backlog, o.Status.Cursor)
	})
	ends, err := consumertest.EndOffsets(ctx, k.Brokers(), "payments", 1)
	if err != nil {
		t.Fatal(err)
	}
	if ends[0] != 1 {
		t.Errorf("payments holds %d records, want the 1 emitted before its removal", ends[0])
	}
	if !te.hasEventsOf(t, ns, "Outbox", "rt", ReasonOutboxTopicRetired) {
		t.Errorf("no %s Event", ReasonOutboxTopicRetired)
	}

	// Removed and named again before it retires: it leaves the list.
	if err := te.updateOutbox(t, ns, "rt", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.Topics = []string{"orders", "payments"} }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "payments granted again", func() (bool, string) {
		got := aclsOf()
		return slices.Equal(got, []string{"orders", "payments"}), fmt.Sprint(got)
	})
	cancel()
	eventually(t, 30*time.Second, "an event to payments emitted again (the relay stopped: unpublished)", func() (bool, string) {
		err := emit("payments")
		return err == nil, fmt.Sprint(err)
	})
	if err := te.updateOutbox(t, ns, "rt", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.Topics = []string{"orders"} }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "payments retiring again, its until read", func() (bool, string) {
		o := te.getOutbox(t, ns, "rt")
		rt := o.Status.RetiringTopics
		return len(rt) == 1 && rt[0].Until != "", fmt.Sprintf("%+v", rt)
	})
	time.Sleep(3 * time.Second) // reconciles go on; the event stays unpublished
	if o := te.getOutbox(t, ns, "rt"); len(o.Status.RetiringTopics) != 1 || o.Status.RetiringTopics[0].Published {
		t.Errorf("retiringTopics %+v with an event unpublished, want payments not published", o.Status.RetiringTopics)
	}
	if got := aclsOf(); !slices.Equal(got, []string{"orders", "payments"}) {
		t.Errorf("KafkaUser ACL topics %v with an event unpublished, want orders and payments", got)
	}
	if err := te.updateOutbox(t, ns, "rt", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.Topics = []string{"payments", "orders"} }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the list empty once payments is named again", func() (bool, string) {
		o := te.getOutbox(t, ns, "rt")
		return o.Status.ObservedGeneration == o.Generation && len(o.Status.RetiringTopics) == 0, fmt.Sprintf("%+v", o.Status.RetiringTopics)
	})
	if got := aclsOf(); !slices.Contains(got, "payments") {
		t.Errorf("KafkaUser ACL topics %v once payments is named again, want payments among them", got)
	}
}
