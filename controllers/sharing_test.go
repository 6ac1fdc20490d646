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
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestTableOnlyAndSharedTables covers issue 14's API side: an object without
// spec.consumer (table only), the application Secret, two objects with their
// own consumer groups on one shared table, and the immutable group id.
func TestTableOnlyAndSharedTables(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{})
	t.Run("TableOnly", func(t *testing.T) { testTableOnly(t, te) })
	t.Run("ConsumerRemoved", func(t *testing.T) { testConsumerRemoved(t, te) })
	t.Run("SharedTable", func(t *testing.T) { testSharedTable(t, te) })
	t.Run("ExclusiveBecomesShared", func(t *testing.T) { testExclusiveBecomesShared(t, te) })
	t.Run("GroupIDImmutable", func(t *testing.T) { testGroupIDImmutable(t, te) })
	t.Run("SamplesBecomeReady", func(t *testing.T) { testNewSamplesBecomeReady(t, te) })
}

// testNewSamplesBecomeReady: the table-only sample and the shared pair of
// config/samples become Ready as they are.
func testNewSamplesBecomeReady(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	te.secret(t, ns, "orders-db", map[string]string{"url": consumertest.DatabaseURL(t)})
	shared := consumertest.DatabaseURL(t)
	te.secret(t, ns, "notifications-db", map[string]string{"url": shared})
	te.secret(t, ns, "notifications-sms", map[string]string{"authorization": "Bearer " + randSuffix()})
	for _, f := range []string{
		"kafka_v1alpha1_idempotentconsumer_orders_tableonly.yaml",
		"kafka_v1alpha1_idempotentconsumer_notifications_email.yaml",
		"kafka_v1alpha1_idempotentconsumer_notifications_sms.yaml",
	} {
		obj := loadSample(t, f)
		obj.Namespace = ns
		te.create(t, obj)
		te.waitReady(t, ns, obj.Name)
	}
	te.poke(t, ns, "notifications-email")
	eventually(t, 30*time.Second, "notifications-email to list both users", func() (bool, string) {
		got := te.get(t, ns, "notifications-email")
		st := got.Status.SharedTable
		return st != nil && len(st.Users) == 2 && st.EffectiveRetention == (336*time.Hour).String(), fmt.Sprintf("%+v", st)
	})
}

func tableOnly(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Consumer = kafkav1alpha1.ConsumerSpec{} }

func shared(group string) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.GroupID = group
		o.Spec.Dedup.Sharing = kafkav1alpha1.SharingShared
	}
}

// appSecret reads the application Secret of an object.
func (te *testEnv) appSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	sec := &corev1.Secret{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name + "-app"}, sec); err != nil {
		t.Fatalf("reading the application Secret %s-app: %v", name, err)
	}
	return sec
}

// claim calls the claim function named in the application Secret for one id
// and group, in a transaction of its own, and returns the verdict.
func claim(t *testing.T, conn *pgx.Conn, fn string, id uuid.UUID, group string) string {
	t.Helper()
	var verdict string
	// fn comes from the Secret, which holds validated [a-z0-9_.] names.
	if !regexp.MustCompile(`^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$`).MatchString(fn) {
		t.Fatalf("claim function name %q is not schema.name", fn)
	}
	if err := conn.QueryRow(context.Background(), "SELECT "+fn+"($1, $2)", id, group).Scan(&verdict); err != nil {
		t.Fatalf("%s(%s, %s): %v", fn, id, group, err)
	}
	return verdict
}

func testTableOnly(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	te.create(t, newConsumer(ns, "orders", tableOnly, withTable("orders_event")))

	got := te.waitReady(t, ns, "orders")
	if got.HasConsumer() {
		t.Fatalf("the object read back has a consumer section: %+v", got.Spec.Consumer)
	}
	for _, ct := range []string{kafkav1alpha1.ConditionConsumerReady, kafkav1alpha1.ConditionReplicasWithinPartitions} {
		if c := got.GetCondition(ct); c != nil {
			t.Errorf("table only: condition %s is present: %+v", ct, c)
		}
	}
	for _, ct := range []string{kafkav1alpha1.ConditionDatabaseReady, kafkav1alpha1.ConditionPartitionsReady} {
		if c := got.GetCondition(ct); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("condition %s = %+v, want True", ct, c)
		}
	}
	if r := got.GetCondition(kafkav1alpha1.ConditionReady); !strings.Contains(r.Message, "table only") {
		t.Errorf("Ready's message %q does not say table only", r.Message)
	}
	st := got.Status
	if st.DeploymentName != "" || st.Replicas != 0 || st.Selector != "" || st.ApplicationSecretName != "orders-app" {
		t.Errorf("status: deployment %q, replicas %d, selector %q, application Secret %q", st.DeploymentName, st.Replicas, st.Selector, st.ApplicationSecretName)
	}
	var deps appsv1.DeploymentList
	if err := te.c.List(context.Background(), &deps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(deps.Items) != 0 {
		t.Fatalf("table only, yet %d Deployment(s) in the namespace: %s", len(deps.Items), deps.Items[0].Name)
	}

	// The application Secret: owned by the object, with the names an
	// application needs, and the claim function it names works.
	sec := te.appSecret(t, ns, "orders")
	if !metav1.IsControlledBy(sec, got) {
		t.Errorf("the application Secret is not controlled by the object: %+v", sec.OwnerReferences)
	}
	want := map[string]string{
		"schema": "public", "table": "orders_event", "scope": "ConsumerGroup", "consumerGroup": "orders-writer",
		"claimFunction": "public.orders_event_claim", "claimOneFunction": "public.orders_event_claim_one",
		"positionsTable": "public.orders_event_offsets",
	}
	for k, v := range want {
		if string(sec.Data[k]) != v {
			t.Errorf("application Secret key %s = %q, want %q", k, sec.Data[k], v)
		}
	}
	if len(sec.Data) != len(want) {
		t.Errorf("application Secret has keys %v, want exactly %v", keysOf(sec.Data), want)
	}
	conn := pgConn(t, dbURL)
	id := uuid.Must(uuid.NewV7())
	if v := claim(t, conn, string(sec.Data["claimOneFunction"]), id, string(sec.Data["consumerGroup"])); v != dedup.VerdictNew {
		t.Errorf("first claim = %s, want new", v)
	}
	if v := claim(t, conn, string(sec.Data["claimOneFunction"]), id, string(sec.Data["consumerGroup"])); v != dedup.VerdictDuplicate {
		t.Errorf("second claim = %s, want duplicate", v)
	}

	// kstatus and the Argo CD health check call it Current / Healthy.
	te.waitKStatus(t, ns, "orders", status.CurrentStatus)

	// A deleted application Secret is put back.
	if err := te.c.Delete(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the application Secret to be recreated", func() (bool, string) {
		s := &corev1.Secret{}
		err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "orders-app"}, s)
		return err == nil && s.UID != sec.UID, fmt.Sprintf("get: %v", err)
	})

	t.Run("a re-created object takes over its predecessor's Secret", func(t *testing.T) {
		old := te.get(t, ns, "orders")
		if err := te.c.Delete(context.Background(), old); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "orders to be gone", func() (bool, string) {
			err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "orders"}, &kafkav1alpha1.IdempotentConsumer{})
			return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
		})
		// envtest runs no garbage collector: the old Secret stays, as it
		// may for a while in a cluster.
		te.create(t, newConsumer(ns, "orders", tableOnly, withTable("orders_event"), func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Database.AdoptFromUID = string(old.UID)
		}))
		got := te.waitReady(t, ns, "orders")
		if sec := te.appSecret(t, ns, "orders"); !metav1.IsControlledBy(sec, got) || len(sec.OwnerReferences) != 1 {
			t.Errorf("the application Secret's owners after re-creation: %+v", sec.OwnerReferences)
		}
	})
	t.Run("with a consumer role the Secret carries its URL as uri", func(t *testing.T) {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		password := "app-pass-" + randSuffix()
		u.User = url.UserPassword("orders_app", password)
		te.secret(t, ns, "db-app", map[string]string{"url": u.String()})
		te.create(t, newConsumer(ns, "roled", tableOnly, withTable("roled_event"), func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Database.ConsumerURLSecretRef = &kafkav1alpha1.SecretKeyRef{Name: "db-app", Key: "url"}
		}))
		te.waitReady(t, ns, "roled")
		if got := string(te.appSecret(t, ns, "roled").Data["uri"]); got != u.String() {
			t.Errorf("uri = %q, want the consumer role's URL", got)
		}
		if strings.Contains(te.logs.String(), password) {
			t.Error("the consumer role's password is in the operator's log")
		}
		for _, e := range te.events(t, ns, "roled") {
			if strings.Contains(e.Note, password) {
				t.Errorf("the consumer role's password is in Event %s", e.Reason)
			}
		}
	})
	t.Run("autoscaling without a consumer is refused", func(t *testing.T) {
		obj := newConsumer(ns, "scaled", tableOnly)
		obj.Spec.Autoscaling = &kafkav1alpha1.AutoscalingSpec{Enabled: true, MaxReplicas: 3}
		err := te.c.Create(context.Background(), obj)
		if err == nil || !strings.Contains(err.Error(), "autoscaling needs a consumer section") {
			t.Fatalf("create = %v, want the autoscaling refusal", err)
		}
	})
	t.Run("a Secret of that name that is not ours stalls the object", func(t *testing.T) {
		te.secret(t, ns, "taken-app", map[string]string{"x": "y"})
		te.create(t, newConsumer(ns, "taken", tableOnly, withTable("taken_event")))
		got := te.waitCondition(t, ns, "taken", kafkav1alpha1.ConditionStalled, metav1.ConditionTrue, kafkav1alpha1.ReasonApplicationSecretConflict)
		if r := got.GetCondition(kafkav1alpha1.ConditionReady); r.Status != metav1.ConditionFalse || !strings.Contains(r.Message, `Secret "taken-app" exists and is not controlled by this object`) {
			t.Errorf("Ready = %+v", r)
		}
		sec := &corev1.Secret{}
		if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "taken-app"}, sec); err != nil || string(sec.Data["x"]) != "y" || len(sec.Data) != 1 {
			t.Errorf("someone else's Secret was changed: %v %v", keysOf(sec.Data), err)
		}
	})
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func testConsumerRemoved(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	te.create(t, newConsumer(ns, "payments"))
	got := te.waitReady(t, ns, "payments")
	dep := &appsv1.Deployment{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: got.Status.DeploymentName}, dep); err != nil {
		t.Fatalf("the consumer Deployment: %v", err)
	}

	if err := te.update(t, ns, "payments", tableOnly); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Deployment to be deleted", func() (bool, string) {
		d := &appsv1.Deployment{}
		err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: dep.Name}, d)
		if err == nil && d.DeletionTimestamp != nil {
			return true, "" // envtest runs no garbage collector: being deleted is what can be seen
		}
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	got = te.waitReady(t, ns, "payments")
	if c := got.GetCondition(kafkav1alpha1.ConditionConsumerReady); c != nil || got.Status.DeploymentName != "" {
		t.Errorf("after removing spec.consumer: ConsumerReady %+v, deploymentName %q", c, got.Status.DeploymentName)
	}
	if !te.hasEvents(t, ns, "payments", ReasonDeploymentDeleted) {
		t.Errorf("no %s Event", ReasonDeploymentDeleted)
	}
}

// seriesCount is how many times an Event was seen (1 for one without a series).
func seriesCount(e eventsv1.Event) int32 {
	if e.Series == nil {
		return 1
	}
	return e.Series.Count
}

var createdRE = regexp.MustCompile(`^Created (\d+) partition`)

func testSharedTable(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	conn := pgConn(t, dbURL)
	const table = "shared_event"
	a := newConsumer(ns, "billing", tableOnly, withTable(table), shared("billing"), withRetention(48*time.Hour), withPremake(2),
		withDeletionPolicy(kafkav1alpha1.DeletionDelete))
	b := newConsumer(ns, "ledger", withTable(table), shared("ledger"), withRetention(240*time.Hour), withPremake(5),
		withDeletionPolicy(kafkav1alpha1.DeletionDelete))
	te.create(t, a)
	te.waitReady(t, ns, "billing")
	te.create(t, b)
	te.waitReady(t, ns, "ledger")
	te.poke(t, ns, "billing") // registered before ledger: sees it on its next reconcile
	var gotA *kafkav1alpha1.IdempotentConsumer
	eventually(t, 30*time.Second, "billing to list both users", func() (bool, string) {
		gotA = te.get(t, ns, "billing")
		st := gotA.Status.SharedTable
		return st != nil && len(st.Users) == 2 && gotA.IsReady(), fmt.Sprintf("%+v; %s", st, conditionsSummary(gotA))
	})
	st := gotA.Status.SharedTable
	if st.Users[0].Object != ns+"/billing" || st.Users[0].ConsumerGroup != "billing" || st.Users[1].ConsumerGroup != "ledger" ||
		st.EffectiveRetention != (240*time.Hour).String() || st.EffectivePremake != 5 {
		t.Errorf("status.sharedTable = %+v", st)
	}
	if owner := markerOwnerOf(t, conn, table); owner != "shared:public."+table {
		t.Errorf("the table's marker names %q, want the shared owner", owner)
	}

	// Maintenance once: each partition was created by one pass of one of
	// the two (a second CREATE would fail), nobody reported a failure, and
	// the partitions cover ledger's 10 days and 5 ahead, not billing's 2 and 2.
	parts := partitions(t, conn, "public", table)
	created := 0
	for _, name := range []string{"billing", "ledger"} {
		for _, e := range te.events(t, ns, name) {
			// The table's and the partitions' warnings (no brokers here, and
			// one role for everything: those warnings are expected).
			if e.Type == corev1.EventTypeWarning && (e.Action == actionMaintainPartitions || e.Action == actionConnectDatabase) {
				t.Errorf("Warning Event on %s: %s: %s", name, e.Reason, e.Note)
			}
			if m := createdRE.FindStringSubmatch(e.Note); e.Reason == ReasonPartitionsCreated && m != nil {
				n, _ := strconv.Atoi(m[1])
				created += n * int(seriesCount(e))
			}
		}
	}
	if created != len(parts) {
		t.Errorf("the PartitionsCreated Events of both objects add up to %d partitions; the table has %d: %v", created, len(parts), parts)
	}
	if len(parts) < 16 {
		t.Errorf("%d partitions: fewer than ledger's 10 days back and 5 ahead: %v", len(parts), parts)
	}

	// Each group deduplicates on its own, through the claim function each
	// object's application Secret names.
	fnA := string(te.appSecret(t, ns, "billing").Data["claimOneFunction"])
	fnB := string(te.appSecret(t, ns, "ledger").Data["claimOneFunction"])
	if fnA != fnB || fnA != "public."+table+"_claim_one" {
		t.Fatalf("claim functions %q and %q", fnA, fnB)
	}
	id := uuid.Must(uuid.NewV7())
	for _, step := range []struct{ group, want string }{
		{"billing", dedup.VerdictNew}, {"billing", dedup.VerdictDuplicate}, {"ledger", dedup.VerdictNew}, {"ledger", dedup.VerdictDuplicate},
	} {
		if v := claim(t, conn, fnA, id, step.group); v != step.want {
			t.Errorf("claim(%s) = %s, want %s", step.group, v, step.want)
		}
	}

	t.Run("the same group on the shared table is refused", func(t *testing.T) {
		te.create(t, newConsumer(ns, "billing-twin", tableOnly, withTable(table), shared("billing")))
		got := te.waitCondition(t, ns, "billing-twin", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonConsumerGroupInUse)
		if msg := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message; !strings.Contains(msg, ns+"/billing") {
			t.Errorf("message %q does not name the holder", msg)
		}
		if err := te.c.Delete(context.Background(), got); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a stale registration of this name says how to remove it", func(t *testing.T) {
		if _, err := conn.Exec(context.Background(), `INSERT INTO public.shared_event_users
			(user_id, consumer_group, object, retention_seconds, premake, drop_on_delete) VALUES ('gone-uid', 'ghost', $1, 3600, 1, false)`, ns+"/ghost"); err != nil {
			t.Fatal(err)
		}
		te.create(t, newConsumer(ns, "ghost", tableOnly, withTable(table), shared("ghost")))
		got := te.waitCondition(t, ns, "ghost", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonConsumerGroupInUse)
		if msg := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message; !strings.Contains(msg, "DELETE FROM public.shared_event_users WHERE user_id = 'gone-uid'") {
			t.Errorf("message %q does not say how to remove the stale registration", msg)
		}
		if _, err := conn.Exec(context.Background(), `DELETE FROM public.shared_event_users WHERE user_id = 'gone-uid'`); err != nil {
			t.Fatal(err)
		}
		te.poke(t, ns, "ghost")
		te.waitReady(t, ns, "ghost")
		if err := te.c.Delete(context.Background(), got); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an exclusive object is refused with what to do", func(t *testing.T) {
		te.create(t, newConsumer(ns, "loner", tableOnly, withTable(table), func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Kafka.GroupID = "loner" }))
		got := te.waitCondition(t, ns, "loner", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonTableClaimed)
		if msg := got.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message; !strings.Contains(msg, "Set spec.dedup.sharing: Shared") {
			t.Errorf("message %q does not say how to join", msg)
		}
		// Gone before the shared table is: a refused object waits for the
		// name, and would make a table of its own there once the last user
		// dropped it. Its deletion leaves the shared table alone.
		if err := te.c.Delete(context.Background(), got); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "loner to be gone", func() (bool, string) {
			err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "loner"}, &kafkav1alpha1.IdempotentConsumer{})
			return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
		})
		if !tableExists(t, conn, "public", table) {
			t.Fatal("deleting the refused object dropped the shared table")
		}
	})
	t.Run("sharing cannot go back to Exclusive", func(t *testing.T) {
		err := te.update(t, ns, "ledger", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Dedup.Sharing = kafkav1alpha1.SharingExclusive })
		if err == nil || !strings.Contains(err.Error(), "sharing cannot change from Shared back to Exclusive") {
			t.Errorf("update to Exclusive = %v", err)
		}
	})

	// Deleting billing (deletionPolicy Delete) unregisters it; ledger keeps
	// the table and its history.
	if err := te.c.Delete(context.Background(), te.get(t, ns, "billing")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "billing to be gone", func() (bool, string) {
		err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "billing"}, &kafkav1alpha1.IdempotentConsumer{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	if !tableExists(t, conn, "public", table) {
		t.Fatal("the shared table was dropped while ledger still uses it")
	}
	if !te.hasEvents(t, ns, "billing", ReasonTableReleased) {
		t.Errorf("no %s Event on billing", ReasonTableReleased)
	}
	te.poke(t, ns, "ledger")
	eventually(t, 30*time.Second, "ledger to list one user", func() (bool, string) {
		got := te.get(t, ns, "ledger")
		st := got.Status.SharedTable
		return st != nil && len(st.Users) == 1 && got.IsReady(), fmt.Sprintf("%+v; %s", st, conditionsSummary(got))
	})
	if v := claim(t, conn, fnB, id, "ledger"); v != dedup.VerdictDuplicate {
		t.Errorf("ledger's claim after billing left = %s, want duplicate (its history kept)", v)
	}

	// The last user with deletionPolicy Delete drops it.
	if err := te.c.Delete(context.Background(), te.get(t, ns, "ledger")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the shared table to be dropped", func() (bool, string) {
		return !tableExists(t, conn, "public", table) && !tableExists(t, conn, "public", table+"_users"), "still there"
	})
}

func testExclusiveBecomesShared(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	conn := pgConn(t, dbURL)
	te.create(t, newConsumer(ns, "first", tableOnly, withTable("grown_event")))
	got := te.waitReady(t, ns, "first")
	if owner := markerOwnerOf(t, conn, "grown_event"); owner != string(got.UID) {
		t.Fatalf("marker owner %q, want the object's UID", owner)
	}
	if err := te.update(t, ns, "first", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Dedup.Sharing = kafkav1alpha1.SharingShared }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the table to be shared", func() (bool, string) {
		got := te.get(t, ns, "first")
		return got.IsReady() && got.Status.SharedTable != nil, conditionsSummary(got)
	})
	if owner := markerOwnerOf(t, conn, "grown_event"); owner != "shared:public.grown_event" {
		t.Errorf("marker owner %q after the switch to Shared", owner)
	}
	if !te.hasEvents(t, ns, "first", ReasonTableShared) {
		t.Errorf("no %s Event", ReasonTableShared)
	}
	te.create(t, newConsumer(ns, "second", tableOnly, withTable("grown_event"), shared("second")))
	te.waitReady(t, ns, "second")
}

func testGroupIDImmutable(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	te.create(t, newConsumer(ns, "grouped", tableOnly))
	err := te.update(t, ns, "grouped", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Kafka.GroupID = "orders-writer-v2" })
	if err == nil || !strings.Contains(err.Error(), "kafka.groupID is immutable with dedup scope ConsumerGroup") ||
		!strings.Contains(err.Error(), "processes every event still in the topic again") {
		t.Errorf("groupID change = %v, want the refusal that says why", err)
	}
	err = te.update(t, ns, "grouped", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.URLSecretRef.Name = "other-db" })
	if err == nil || !strings.Contains(err.Error(), "database.urlSecretRef is immutable") {
		t.Errorf("urlSecretRef change = %v, want the refusal", err)
	}
	// Under scope Global the group is not part of the dedup key: allowed.
	te.create(t, newConsumer(ns, "global", tableOnly, withTable("global_event"), func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Dedup.Scope = kafkav1alpha1.ScopeGlobal
	}))
	if err := te.update(t, ns, "global", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Kafka.GroupID = "orders-writer-v2" }); err != nil {
		t.Errorf("groupID change under scope Global = %v, want it accepted", err)
	}
	// Other fields still change.
	if err := te.update(t, ns, "grouped", withRetention(240*time.Hour)); err != nil {
		t.Errorf("retention change = %v", err)
	}
}

// markerOwnerOf is the owner named in the marker of public.table.
func markerOwnerOf(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	var owner *string
	if err := conn.QueryRow(context.Background(), `SELECT obj_description(to_regclass($1), 'pg_class')::json->>'idempotency.dev/owner'`,
		pgx.Identifier{"public", table}.Sanitize()).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner == nil {
		return ""
	}
	return *owner
}
