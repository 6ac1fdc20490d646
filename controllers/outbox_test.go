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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/consumer/outbox"
)

func newOutbox(ns, name string, brokers []string, topics ...string) *kafkav1alpha1.Outbox {
	return &kafkav1alpha1.Outbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kafkav1alpha1.OutboxSpec{
			Kafka: kafkav1alpha1.OutboxKafkaSpec{BootstrapServers: brokers, Topics: topics},
			Database: kafkav1alpha1.OutboxDatabaseSpec{
				URLSecretRef: kafkav1alpha1.SecretKeyRef{Name: "db", Key: "url"},
				Table:        strings.ReplaceAll(name, "-", "_") + "_outbox",
			},
		},
	}
}

func (te *testEnv) getOutbox(t testing.TB, ns, name string) *kafkav1alpha1.Outbox {
	t.Helper()
	o := &kafkav1alpha1.Outbox{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, o); err != nil {
		t.Fatalf("getting Outbox %s/%s: %v", ns, name, err)
	}
	return o
}

// updateOutbox: update for an Outbox.
func (te *testEnv) updateOutbox(t testing.TB, ns, name string, mutate func(*kafkav1alpha1.Outbox)) error {
	t.Helper()
	return updateObject(te, &kafkav1alpha1.Outbox{}, ns, name, mutate)
}

func outboxConditions(o *kafkav1alpha1.Outbox) string {
	var parts []string
	for _, c := range o.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("generation %d observed %d; %s", o.Generation, o.Status.ObservedGeneration, strings.Join(parts, "; "))
}

// waitOutbox waits for the Outbox's condition with that status and reason
// for its current generation, its message naming every one of names.
func (te *testEnv) waitOutbox(t testing.TB, ns, name, condType string, status metav1.ConditionStatus, reason string, names ...string) *kafkav1alpha1.Outbox {
	t.Helper()
	var o *kafkav1alpha1.Outbox
	eventually(t, 30*time.Second, fmt.Sprintf("Outbox %s %s=%s/%s naming %q", name, condType, status, reason, names), func() (bool, string) {
		o = te.getOutbox(t, ns, name)
		c := meta.FindStatusCondition(o.Status.Conditions, condType)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) || c.ObservedGeneration != o.Generation {
			return false, outboxConditions(o)
		}
		for _, n := range names {
			if !strings.Contains(c.Message, n) {
				return false, outboxConditions(o)
			}
		}
		return true, ""
	})
	return o
}

// TestOutboxTableRelayAndStatus: an Outbox makes its table (marked with its
// UID) and partitions, the relay Deployment (exact labels, env from the
// spec and Secrets only, no CONSUMER_OUTBOX_OWNER, the restricted pod), and
// turns Ready; events emitted show in status.backlog and
// oldestUnpublishedTime (no relay runs in envtest); a relay run in process
// against the test broker publishes them, and the backlog goes to 0 with
// the cursor moved. The operator's gauges follow.
func TestOutboxTableRelayAndStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{realClock: true, options: Options{KafkaTimeout: 2 * time.Second}})
	ns := te.namespace(t)
	url := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": url})
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "orders", 2)

	ob := newOutbox(ns, "shop", k.Brokers(), "orders")
	te.create(t, ob)
	o := te.waitOutbox(t, ns, "shop", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
	for _, c := range []string{kafkav1alpha1.ConditionDatabaseReady, kafkav1alpha1.ConditionPartitionsReady, kafkav1alpha1.ConditionKafkaReady, kafkav1alpha1.ConditionRelayReady} {
		if got := o.GetCondition(c); got == nil || got.Status != metav1.ConditionTrue {
			t.Errorf("%s: %+v", c, got)
		}
	}
	if c := o.GetCondition(kafkav1alpha1.ConditionDatabaseDurable); c == nil || c.Status != metav1.ConditionTrue || c.Reason != kafkav1alpha1.ReasonDurable {
		t.Errorf("DatabaseDurable on a server without standbys: %+v", c)
	}
	if o.Status.Table != "public.shop_outbox" || o.Status.EmitFunction != "public.shop_outbox_emit" {
		t.Errorf("status table %q, emit function %q", o.Status.Table, o.Status.EmitFunction)
	}
	if o.Status.Partitions == nil || o.Status.Partitions.Count < 5 {
		t.Errorf("status.partitions %+v, want the current one and 4 ahead", o.Status.Partitions)
	}
	if o.Status.Backlog == nil || *o.Status.Backlog != 0 || o.Status.OldestUnpublishedTime != nil || o.Status.Cursor == nil {
		t.Errorf("a new outbox: backlog %v, oldest %v, cursor %+v", o.Status.Backlog, o.Status.OldestUnpublishedTime, o.Status.Cursor)
	}

	conn := pgConn(t, url)
	var comment string
	if err := conn.QueryRow(context.Background(), `SELECT obj_description('public.shop_outbox'::regclass, 'pg_class')`).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(comment, string(o.UID)) || !strings.Contains(comment, outbox.Kind) {
		t.Errorf("the table's marker %q names neither the Outbox's UID %s nor kind %s", comment, o.UID, outbox.Kind)
	}

	// The relay Deployment.
	dep := &appsv1.Deployment{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "shop-outbox-relay"}, dep); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(dep, o) {
		t.Errorf("the relay Deployment is not controlled by the Outbox: %+v", dep.OwnerReferences)
	}
	if got := ptr.Deref(dep.Spec.Replicas, -1); got != 2 {
		t.Errorf("replicas %d, want the default 2", got)
	}
	pod := dep.Spec.Template
	for k, v := range map[string]string{"app.kubernetes.io/name": "outbox-relay", "app.kubernetes.io/instance": "shop", "app.kubernetes.io/managed-by": "idempotency-operator"} {
		if pod.Labels[k] != v {
			t.Errorf("pod label %s=%q, want %q (config/monitoring's PodMonitor selects on it)", k, pod.Labels[k], v)
		}
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]
	if len(ctr.Args) != 1 || ctr.Args[0] != "outbox-relay" {
		t.Errorf("args %q, want [outbox-relay]", ctr.Args)
	}
	if len(ctr.Ports) != 1 || ctr.Ports[0].Name != "http" || ctr.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v, want http 8080", ctr.Ports)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	want := map[string]string{
		envvars.Brokers: strings.Join(k.Brokers(), ","), envvars.OutboxSchema: "public", envvars.OutboxTable: "shop_outbox",
		envvars.OutboxPublishTimeout: "5s", envvars.OutboxPollInterval: "1s", envvars.OutboxBatchSize: "500",
		envvars.OutboxMaxMessageBytes: "1048576", envvars.ListenAddr: ":8080",
	}
	for name, v := range want {
		if env[name].Value != v {
			t.Errorf("env %s=%q, want %q", name, env[name].Value, v)
		}
	}
	if e := env[envvars.DatabaseURL]; e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != "db" || e.ValueFrom.SecretKeyRef.Key != "url" {
		t.Errorf("env %s = %+v, want a reference to Secret db key url", envvars.DatabaseURL, e)
	}
	if _, ok := env[envvars.OutboxOwner]; ok {
		t.Errorf("env has %s: the operator owns the DDL, the relay must not", envvars.OutboxOwner)
	}
	for _, e := range ctr.Env {
		if strings.Contains(e.Value, url) {
			t.Errorf("env %s holds the database URL in clear", e.Name)
		}
	}
	sc, psc := ctr.SecurityContext, pod.Spec.SecurityContext
	if sc == nil || psc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		!ptr.Deref(psc.RunAsNonRoot, false) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
		t.Errorf("not the restricted pod: container %+v, pod %+v", sc, psc)
	}

	// Emitted, not relayed: the backlog and the oldest show.
	tbl := outbox.Table{Schema: "public", Name: "shop_outbox"}
	before := time.Now().Add(-time.Second)
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := outbox.Emit(context.Background(), tx, tbl, outbox.Message{Topic: "orders", Key: []byte(fmt.Sprint("k", i)), Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "status.backlog 3 with the oldest unpublished time", func() (bool, string) {
		o = te.getOutbox(t, ns, "shop")
		ok := o.Status.Backlog != nil && *o.Status.Backlog == 3 && o.Status.OldestUnpublishedTime != nil &&
			!o.Status.OldestUnpublishedTime.Time.Before(before.Truncate(time.Second))
		return ok, fmt.Sprintf("backlog %v oldest %v", o.Status.Backlog, o.Status.OldestUnpublishedTime)
	})
	cursorBefore := *o.Status.Cursor
	waitGauge(t, MetricOutboxBacklog, ns, "shop", "= 3", func(v float64) bool { return v == 3 })
	waitGauge(t, MetricOutboxOldestAge, ns, "shop", "> 0", func(v float64) bool { return v > 0 })

	// A relay in process publishes them: backlog 0, the cursor moved.
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(outbox.Config{Table: tbl, ConnConfig: cc, Brokers: k.Brokers(), PollInterval: 50 * time.Millisecond,
		PublishTimeout: 2 * time.Second, TakeoverDelay: 4100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() { cancel(); t.Logf("relay stopped: %v", <-done) }()
	eventually(t, 60*time.Second, "status.backlog 0 after the relay ran", func() (bool, string) {
		o = te.getOutbox(t, ns, "shop")
		ok := o.Status.Backlog != nil && *o.Status.Backlog == 0 && o.Status.OldestUnpublishedTime == nil
		return ok, fmt.Sprintf("backlog %v oldest %v cursor %+v", o.Status.Backlog, o.Status.OldestUnpublishedTime, o.Status.Cursor)
	})
	if *o.Status.Cursor == cursorBefore {
		t.Errorf("the cursor did not move: %+v", o.Status.Cursor)
	}
	ends, err := consumertest.EndOffsets(context.Background(), k.Brokers(), "orders", 2)
	if err != nil {
		t.Fatal(err)
	}
	if ends[0]+ends[1] != 3 {
		t.Errorf("topic orders holds %v records, want 3", ends)
	}
	waitGauge(t, MetricOutboxBacklog, ns, "shop", "= 0 after the relay", func(v float64) bool { return v == 0 })
	waitGauge(t, MetricOutboxReady, ns, "shop", "= 1", func(v float64) bool { return v == 1 })

	// Deleted: the Deployment goes with it (owner reference), the table
	// stays (its rows are committed events).
	if err := te.c.Delete(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Outbox gone", func() (bool, string) {
		err := te.c.Get(context.Background(), client.ObjectKeyFromObject(o), &kafkav1alpha1.Outbox{})
		return client.IgnoreNotFound(err) == nil && err != nil, fmt.Sprint(err)
	})
	if !tableExists(t, conn, "public", "shop_outbox") || !tableExists(t, conn, "public", "shop_outbox_relay") {
		t.Error("deleting the Outbox dropped its table or its cursor")
	}
}

// gaugeValue reads one series of a gauge from the operator's registry, or
// fails.
// waitGauge waits for the operator's series name{namespace=ns,name=obj} to
// satisfy want (described by what). The collector reads the manager's
// cache, which follows the API server a moment after the status a test
// just read: a gauge is waited for, never read once.
func waitGauge(t testing.TB, name, ns, obj, what string, want func(float64) bool) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%s{namespace=%q,name=%q} %s", name, ns, obj, what), func() (bool, string) {
		v, found, err := gaugeValue(name, ns, obj)
		switch {
		case err != nil:
			return false, err.Error()
		case !found:
			return false, "no such series"
		}
		return want(v), fmt.Sprint(v)
	})
}

// gaugeValue is the operator's series name{namespace=ns,name=obj}.
func gaugeValue(name, ns, obj string) (v float64, found bool, err error) {
	fams, err := metrics.Registry.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelIs(m, "namespace", ns) && labelIs(m, "name", obj) {
				return m.GetGauge().GetValue(), true, nil
			}
		}
	}
	return 0, false, nil
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// TestOutboxKafkaConditions: a topic that does not exist and a broker that
// cannot be reached each turn KafkaReady and Ready False with the
// IdempotentConsumer's reasons, naming the topic or the address as
// written; creating the topic turns it Ready with no change to the object.
func TestOutboxKafkaConditions(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{realClock: true, options: Options{KafkaTimeout: 2 * time.Second}})
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "present", 1)

	te.create(t, newOutbox(ns, "late", k.Brokers(), "present", "late-topic"))
	te.waitOutbox(t, ns, "late", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTopicNotFound, `"late-topic"`)
	o := te.waitOutbox(t, ns, "late", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTopicNotFound, `"late-topic"`)
	if c := o.GetCondition(kafkav1alpha1.ConditionKafkaReady); strings.Contains(c.Message, `"present"`) {
		t.Errorf("KafkaReady names the topic that exists: %s", c.Message)
	}
	gen := o.Generation
	k.MustCreateTopic(t, "late-topic", 1)
	o = te.waitOutbox(t, ns, "late", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
	if o.Generation != gen {
		t.Errorf("generation %d, want %d", o.Generation, gen)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	te.create(t, newOutbox(ns, "down", []string{addr}, "orders"))
	te.waitOutbox(t, ns, "down", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonBrokerUnreachable, addr)
	te.waitOutbox(t, ns, "down", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonBrokerUnreachable, addr)
	// The table and the relay are made anyway: the relay publishes once the
	// brokers answer.
	te.waitOutbox(t, ns, "down", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionTrue, "")
	te.waitOutbox(t, ns, "down", kafkav1alpha1.ConditionRelayReady, metav1.ConditionTrue, "")
	waitGauge(t, MetricOutboxReady, ns, "down", "= 0", func(v float64) bool { return v == 0 })

	// A topic that takes smaller records than the relay sends: an event
	// between the two would hold the stream. A warning (KafkaReady stays
	// True, with a Warning Event) naming the numbers and the fix; gone once
	// spec.relay.maxMessageBytes is lowered to the topic's limit, which the
	// emit function then enforces.
	if err := consumertest.CreateTopic(context.Background(), k.Brokers(), "small", 1, map[string]string{"max.message.bytes": "2000"}); err != nil {
		t.Fatal(err)
	}
	te.create(t, newOutbox(ns, "tight", k.Brokers(), "present", "small"))
	o = te.waitOutbox(t, ns, "tight", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionTrue, kafkav1alpha1.ReasonTopicsFound,
		`"small"`, "2000", "1048576", "spec.relay.maxMessageBytes")
	if c := o.GetCondition(kafkav1alpha1.ConditionKafkaReady); strings.Contains(c.Message, `"present" takes`) {
		t.Errorf("KafkaReady warns of a topic with the default limit: %s", c.Message)
	}
	sizes := map[string]int64{}
	for _, ts := range o.Status.Topics {
		sizes[ts.Name] = ts.MaxMessageBytes
	}
	if sizes["small"] != 2000 || sizes["present"] <= 1048576 {
		t.Errorf("status.topics max message bytes %v, want small 2000 and present the broker's default", sizes)
	}
	eventually(t, 10*time.Second, "a Warning Event "+ReasonTopicLimitBelowRelay, func() (bool, string) {
		evs := te.eventsOf(t, ns, "Outbox", "tight")
		return hasEvent(evs, ReasonTopicLimitBelowRelay), fmt.Sprintf("%d events", len(evs))
	})
	if err := te.updateOutbox(t, ns, "tight", func(o *kafkav1alpha1.Outbox) {
		o.Spec.Relay.MaxMessageBytes = ptr.To[int32](2000)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "KafkaReady without the warning", func() (bool, string) {
		o := te.getOutbox(t, ns, "tight")
		c := o.GetCondition(kafkav1alpha1.ConditionKafkaReady)
		if c == nil || c.ObservedGeneration != o.Generation || c.Status != metav1.ConditionTrue || strings.Contains(c.Message, "spec.relay.maxMessageBytes") {
			return false, outboxConditions(o)
		}
		return true, ""
	})
}

// TestOutboxConsumerRetention: an IdempotentConsumer of the namespace that
// reads one of the outbox's topics and remembers event ids for less than
// the outbox's retention plus the topic's turns ConsumerRetentionCovered
// False, naming it and the numbers, with a Warning Event; raising its
// retention turns it True with no change to the Outbox (the operator
// watches the consumers). Ready does not depend on it.
func TestOutboxConsumerRetention(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{realClock: true, options: Options{KafkaTimeout: 2 * time.Second}})
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	k := consumertest.NewKafka(t)
	if err := consumertest.CreateTopic(context.Background(), k.Brokers(), "payments", 1, map[string]string{"retention.ms": "86400000"}); err != nil {
		t.Fatal(err)
	}
	te.create(t, newConsumer(ns, "payer", withTable("payer"), withKafka(k.Brokers(), "payments"), withRetention(48*time.Hour)))
	te.create(t, newConsumer(ns, "other", withTable("other"), withKafka(k.Brokers(), "unrelated"), withRetention(24*time.Hour)))

	ob := newOutbox(ns, "pay", k.Brokers(), "payments")
	ob.Spec.Partitioning.Retention = &metav1.Duration{Duration: 168 * time.Hour}
	te.create(t, ob)
	o := te.waitOutbox(t, ns, "pay", kafkav1alpha1.ConditionConsumerRetentionCovered, metav1.ConditionFalse, kafkav1alpha1.ReasonConsumerRetentionShort,
		"payer", "48h0m0s", "168h0m0s", `"payments"`, "24h0m0s", "192h0m0s")
	if c := o.GetCondition(kafkav1alpha1.ConditionConsumerRetentionCovered); strings.Contains(c.Message, "other") {
		t.Errorf("the message names a consumer of another topic: %s", c.Message)
	}
	te.waitOutbox(t, ns, "pay", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
	eventually(t, 10*time.Second, "a Warning Event "+kafkav1alpha1.ReasonConsumerRetentionShort, func() (bool, string) {
		evs := te.eventsOf(t, ns, "Outbox", "pay")
		return hasEvent(evs, kafkav1alpha1.ReasonConsumerRetentionShort), fmt.Sprintf("%d events", len(evs))
	})

	gen := o.Generation
	if err := te.update(t, ns, "payer", func(ic *kafkav1alpha1.IdempotentConsumer) {
		ic.Spec.Dedup.Retention = &metav1.Duration{Duration: 200 * time.Hour}
	}); err != nil {
		t.Fatal(err)
	}
	o = te.waitOutbox(t, ns, "pay", kafkav1alpha1.ConditionConsumerRetentionCovered, metav1.ConditionTrue, kafkav1alpha1.ReasonConsumerRetentionCovered, "payer")
	if o.Generation != gen {
		t.Errorf("the Outbox changed: generation %d, want %d", o.Generation, gen)
	}
}

// TestOutboxValidation: the API server refuses hostile or impossible specs
// with a message naming the field, and takes the sample.
func TestOutboxValidation(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest: skipped with -short")
	}
	te := startEnv(t, envOptions{realClock: true})
	ns := te.namespace(t)
	for _, tc := range []struct {
		name, want string
		mod        func(*kafkav1alpha1.Outbox)
	}{
		{"ReservedTable", "reserved word", func(o *kafkav1alpha1.Outbox) { o.Spec.Database.Table = "select" }},
		{"QuotedTable", "spec.database.table", func(o *kafkav1alpha1.Outbox) { o.Spec.Database.Table = `x"; DROP TABLE y; --` }},
		{"SystemSchema", "system schema", func(o *kafkav1alpha1.Outbox) { o.Spec.Database.Schema = "pg_catalog" }},
		{"PublicEmitter", "public (every role)", func(o *kafkav1alpha1.Outbox) { o.Spec.Database.EmitterRoles = []string{"app", "Public"} }},
		{"PredefinedRoleEmitter", "predefined pg_ roles", func(o *kafkav1alpha1.Outbox) { o.Spec.Database.EmitterRoles = []string{"pg_monitor"} }},
		{"DotTopic", "'.' or '..'", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.Topics = []string{".."} }},
		{"BadTopic", "spec.kafka.topics", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.Topics = []string{"a b"} }},
		{"NoTopics", "spec.kafka.topics", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.Topics = nil }},
		{"BadBroker", "spec.kafka.bootstrapServers", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.BootstrapServers = []string{"http://x:1"} }},
		{"ShortRetention", "at least one partition interval", func(o *kafkav1alpha1.Outbox) {
			o.Spec.Partitioning.Retention = &metav1.Duration{Duration: time.Hour}
		}},
		{"TooManyRelays", "spec.relay.replicas", func(o *kafkav1alpha1.Outbox) { o.Spec.Relay.Replicas = ptr.To(int32(11)) }},
		{"BadEmitterRole", "spec.database.emitterRoles", func(o *kafkav1alpha1.Outbox) { o.Spec.Database.EmitterRoles = []string{`a"b`} }},
		{"LongName", "at most 50 characters", func(o *kafkav1alpha1.Outbox) { o.Name = strings.Repeat("a", 51) }},
		{"TinyPublishTimeout", "publishTimeout", func(o *kafkav1alpha1.Outbox) {
			o.Spec.Relay.PublishTimeout = &metav1.Duration{Duration: time.Millisecond}
		}},
		// platforms_outbox_test.go: CloudNativePG and Strimzi in place of the refs.
		{"BrokersAndStrimzi", "exactly one of kafka.bootstrapServers and kafka.strimzi", func(o *kafkav1alpha1.Outbox) {
			o.Spec.Kafka.Strimzi = &kafkav1alpha1.StrimziCluster{Cluster: "kc"}
		}},
		{"NoBrokers", "exactly one of kafka.bootstrapServers and kafka.strimzi", func(o *kafkav1alpha1.Outbox) { o.Spec.Kafka.BootstrapServers = nil }},
		{"StrimziAndSASL", "leave tls and sasl unset", func(o *kafkav1alpha1.Outbox) {
			outboxStrimzi("kc")(o)
			o.Spec.Kafka.SASL = &kafkav1alpha1.KafkaSASL{Mechanism: kafkav1alpha1.SASLScramSHA512,
				UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: "u", Key: "u"}, PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: "p", Key: "p"}}
		}},
		{"URLAndCloudNativePG", "exactly one of database.urlSecretRef and database.cloudNativePG", func(o *kafkav1alpha1.Outbox) {
			o.Spec.Database.CloudNativePG = &kafkav1alpha1.OutboxCloudNativePGSpec{CloudNativePGCluster: kafkav1alpha1.CloudNativePGCluster{Cluster: "pg"}}
		}},
		{"CloudNativePGAndRelayURL", "leave relayURLSecretRef and caSecretRef unset", func(o *kafkav1alpha1.Outbox) {
			outboxCNPG("pg")(o)
			o.Spec.Database.RelayURLSecretRef = &kafkav1alpha1.SecretKeyRef{Name: "relay", Key: "url"}
		}},
		{"PublicRelayRole", "public (every role)", func(o *kafkav1alpha1.Outbox) {
			outboxCNPG("pg")(o)
			o.Spec.Database.CloudNativePG.RelayRole = &kafkav1alpha1.CloudNativePGRole{Name: "PUBLIC", SecretRef: kafkav1alpha1.LocalObjectName{Name: "r"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOutbox(ns, "v", []string{"kafka-0.kafka:9092"}, "orders")
			tc.mod(o)
			err := te.c.Create(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
	t.Run("CloudNativePGNotAddedLater", func(t *testing.T) {
		te.create(t, newOutbox(ns, "later", []string{"kafka-0.kafka:9092"}, "orders"))
		if err := te.updateOutbox(t, ns, "later", outboxCNPG("pg")); err == nil || !strings.Contains(err.Error(), "cannot be added or removed") {
			t.Errorf("got %v, want database.cloudNativePG cannot be added or removed", err)
		}
	})
	t.Run("ImmutableTable", func(t *testing.T) {
		te.create(t, newOutbox(ns, "imm", []string{"kafka-0.kafka:9092"}, "orders"))
		err := te.updateOutbox(t, ns, "imm", func(o *kafkav1alpha1.Outbox) { o.Spec.Database.Table = "elsewhere" })
		if err == nil || !strings.Contains(err.Error(), "table is immutable") {
			t.Errorf("got %v, want table is immutable", err)
		}
	})
	t.Run("Sample", func(t *testing.T) {
		f, err := os.Open(filepath.Join("..", "config", "samples", "kafka_v1alpha1_outbox_orders.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		u := &kafkav1alpha1.Outbox{}
		if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(u); err != nil {
			t.Fatal(err)
		}
		u.Namespace = ns
		if err := te.c.Create(context.Background(), u); err != nil {
			t.Errorf("the sample is refused: %v", err)
		}
	})
}

// TestOutboxRolesAndDatabaseProblems: the relay's own role
// (spec.database.relayURLSecretRef) gets SELECT on the outbox and SELECT,
// UPDATE on its cursor, and its Secret (never the owner's) reaches the
// relay pods; an emitter role gets INSERT and EXECUTE on the emit function,
// no SELECT; a missing Secret, a missing emitter role and a table another
// object owns each say so in DatabaseReady and Ready.
func TestOutboxRolesAndDatabaseProblems(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te, ns, dbURL, admin := outboxOwnerEnv(t)
	ctx := context.Background()
	relay := consumertest.NewRole(t, dbURL, "relay")
	emitter := consumertest.NewRole(t, dbURL, "emitter")
	te.secret(t, ns, "db-relay", map[string]string{"url": relay.URL})
	may := func(role, object, priv string) bool {
		t.Helper()
		var ok bool
		q := `SELECT has_table_privilege($1, $2, $3)`
		if strings.HasSuffix(object, ")") {
			q = `SELECT has_function_privilege($1, $2, $3)`
		}
		if err := admin.QueryRow(ctx, q, role, object, priv).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	ob := newOutbox(ns, "roles", []string{"kafka-0.kafka:9092"}, "orders")
	ob.Spec.Database.Schema = "shop"
	ob.Spec.Database.RelayURLSecretRef = &kafkav1alpha1.SecretKeyRef{Name: "db-relay", Key: "url"}
	ob.Spec.Database.EmitterRoles = []string{emitter.Name}
	ob.Spec.Relay.MaxMessageBytes = ptr.To[int32](2000)
	te.create(t, ob)
	o := te.waitOutbox(t, ns, "roles", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
	// The emit function refuses what the relay would not send
	// (spec.relay.maxMessageBytes), in the emitter's transaction.
	em := pgConn(t, emitter.URL)
	if _, err := em.Exec(ctx, `SELECT shop.roles_outbox_emit('orders', 'k'::bytea, $1::bytea)`, make([]byte, 100)); err != nil {
		t.Errorf("emitting 100 bytes as the emitter role: %v", err)
	}
	var pe *pgconn.PgError
	if _, err := em.Exec(ctx, `SELECT shop.roles_outbox_emit('orders', 'k'::bytea, $1::bytea)`, make([]byte, 3000)); !errors.As(err, &pe) || pe.Code != "54000" || !strings.Contains(pe.Message, "2000 bytes") {
		t.Errorf("emitting 3000 bytes with spec.relay.maxMessageBytes 2000: %v, want SQLSTATE 54000 naming the limit", err)
	}
	// ... and an event to a topic not in spec.kafka.topics.
	if _, err := em.Exec(ctx, `SELECT shop.roles_outbox_emit('ledger-internal', 'k'::bytea, 'p'::bytea)`); !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, "'ledger-internal'") {
		t.Errorf("emitting to a topic not in spec.kafka.topics: %v, want SQLSTATE 22023 naming it", err)
	}
	if o.Status.RelayRole != relay.Name {
		t.Errorf("status.relayRole %q, want %q", o.Status.RelayRole, relay.Name)
	}
	tbl, cur, fn := "shop.roles_outbox", "shop.roles_outbox_relay", "shop.roles_outbox_emit(text, bytea, bytea, jsonb, text)"
	for _, c := range []struct {
		role, object, priv string
		want               bool
	}{
		{relay.Name, tbl, "SELECT", true}, {relay.Name, cur, "UPDATE", false}, {relay.Name, tbl, "INSERT", false}, {relay.Name, tbl, "DELETE", false},
		{emitter.Name, fn, "EXECUTE", true}, {emitter.Name, tbl, "SELECT", false}, {emitter.Name, cur, "SELECT", false}, {emitter.Name, tbl, "DELETE", false},
	} {
		if got := may(c.role, c.object, c.priv); got != c.want {
			t.Errorf("%s %s on %s: %v, want %v", c.role, c.priv, c.object, got, c.want)
		}
	}
	// The relay updates the cursor's columns, not the relays' lock key.
	for col, want := range map[string]bool{"lo": true, "hi": true, "after": true, "lock_key": false} {
		var got bool
		if err := admin.QueryRow(ctx, `SELECT has_column_privilege($1, $2, $3, 'UPDATE')`, relay.Name, cur, col).Scan(&got); err != nil || got != want {
			t.Errorf("relay UPDATE of %s.%s: %v (err %v), want %v", cur, col, got, err, want)
		}
	}
	dep := &appsv1.Deployment{}
	if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "roles-outbox-relay"}, dep); err != nil {
		t.Fatal(err)
	}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == envvars.DatabaseURL && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "db-relay") {
			t.Errorf("%s = %+v, want the relay's Secret db-relay", envvars.DatabaseURL, e)
		}
	}

	t.Run("SecretMissing", func(t *testing.T) {
		bad := newOutbox(ns, "nosecret", []string{"kafka-0.kafka:9092"}, "orders")
		bad.Spec.Database.URLSecretRef.Name = "absent"
		te.create(t, bad)
		te.waitOutbox(t, ns, "nosecret", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSecretNotFound, `"absent"`)
		te.waitOutbox(t, ns, "nosecret", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSecretNotFound)
	})
	t.Run("EmitterRoleMissing", func(t *testing.T) {
		bad := newOutbox(ns, "norole", []string{"kafka-0.kafka:9092"}, "orders")
		bad.Spec.Database.Schema = "shop"
		bad.Spec.Database.EmitterRoles = []string{"no_such_role_" + randSuffix()}
		te.create(t, bad)
		te.waitOutbox(t, ns, "norole", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonGrantFailed, bad.Spec.Database.EmitterRoles[0])
	})
	t.Run("TableOfAnotherObject", func(t *testing.T) {
		bad := newOutbox(ns, "thief", []string{"kafka-0.kafka:9092"}, "orders")
		bad.Spec.Database.Schema = "shop"
		bad.Spec.Database.Table = "roles_outbox"
		te.create(t, bad)
		te.waitOutbox(t, ns, "thief", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableClaimed, "shop.roles_outbox", string(o.UID))
	})
}

// outboxOwnerEnv starts envtest with a namespace whose Secret "db" holds
// the URL of a role of its own for the operator, and the schema "shop"
// made for that role, which has no CREATE on the database (outbox.Ensure
// needs none where the schema exists). It returns the superuser's URL and
// connection for the test's own roles and checks.
func outboxOwnerEnv(t *testing.T) (te *testEnv, ns, dbURL string, admin *pgx.Conn) {
	t.Helper()
	te = startEnv(t, envOptions{realClock: true})
	ns = te.namespace(t)
	dbURL = consumertest.DatabaseURL(t)
	owner := consumertest.NewRole(t, dbURL, "operator")
	admin = pgConn(t, dbURL)
	if _, err := admin.Exec(context.Background(), "CREATE SCHEMA shop AUTHORIZATION "+pgx.Identifier{owner.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	te.secret(t, ns, "db", map[string]string{"url": owner.URL})
	return te, ns, dbURL, admin
}
