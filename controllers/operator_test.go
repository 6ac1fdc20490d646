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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// TestOperator runs the envtest scenarios against one API server, one
// manager and the shared PostgreSQL cluster; each subtest has its own
// namespace and database. Subtests run in order: the clock test moves the
// manager's clock forward for the ones after it.
func TestOperator(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{})
	t.Run("SampleBecomesReady", func(t *testing.T) { testSampleBecomesReady(t, te) })
	t.Run("ScheduleMovesPartitions", func(t *testing.T) { testScheduleMovesPartitions(t, te) })
	t.Run("SpecUpdates", func(t *testing.T) { testSpecUpdates(t, te) })
	t.Run("ImmutableFields", func(t *testing.T) { testImmutableFields(t, te) })
	t.Run("InvalidObjectsRejected", func(t *testing.T) { testInvalidObjectsRejected(t, te) })
	t.Run("Failures", func(t *testing.T) { testFailures(t, te) })
	t.Run("Deletion", func(t *testing.T) { testDeletion(t, te) })
	t.Run("Suspend", func(t *testing.T) { testSuspend(t, te) })
	// The ones below move the clock past Options.TopicRefresh.
	t.Run("KStatus", func(t *testing.T) { testKStatus(t, te) })
	t.Run("NoGitOpsDrift", func(t *testing.T) { testNoGitOpsDrift(t, te) })
	t.Run("TopicRetention", func(t *testing.T) { testTopicRetention(t, te) })
	t.Run("Autoscaling", func(t *testing.T) { testAutoscaling(t, te) })
}

// loadSample reads the IdempotentConsumer from a file in config/samples.
func loadSample(t *testing.T, file string) *kafkav1alpha1.IdempotentConsumer {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	obj := &kafkav1alpha1.IdempotentConsumer{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(obj); err != nil {
		t.Fatalf("decoding %s: %v", file, err)
	}
	return obj
}

func testSampleBecomesReady(t *testing.T, te *testEnv) {
	ctx := context.Background()
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	password := consumertest.SharedPostgres(t).Password()

	obj := loadSample(t, "kafka_v1alpha1_idempotentconsumer_billing.yaml")
	obj.Namespace = ns
	te.secret(t, ns, "billing-db", map[string]string{"url": dbURL})
	te.secret(t, ns, "billing-kafka", map[string]string{"username": "billing-charger", "password": "kafka-pass-" + randSuffix()})
	_, caPEM := selfSignedPEM(t) // a CA the operator can load to ask the brokers (KafkaReady)
	te.secret(t, ns, "kafka-ca", map[string]string{"ca.crt": caPEM})
	te.secret(t, ns, "billing-sink", map[string]string{"authorization": "Bearer " + randSuffix()})
	te.create(t, obj)

	got := te.waitReady(t, ns, obj.Name)

	// PostgreSQL: the table and its partitions.
	conn := pgConn(t, dbURL)
	if !tableExists(t, conn, "billing", "processed_event") {
		t.Fatal("table billing.processed_event was not created")
	}
	parts := partitions(t, conn, "billing", "processed_event")
	// 336h retention of Daily partitions: the 14 days before today, today,
	// and 4 premade: 15 + 4 at least (16 + 4 when now-retention is mid-day).
	if len(parts) < 19 || len(parts) > 20 {
		t.Errorf("got %d partitions, want 19 or 20: %v", len(parts), parts)
	}

	// Status.
	st := got.Status
	if st.Partitions == nil || int(st.Partitions.Count) != len(parts) {
		t.Errorf("status.partitions = %+v, want count %d", st.Partitions, len(parts))
	}
	if st.Partitions != nil && (st.Partitions.Ahead < 4 || st.Partitions.Oldest != parts[0] || st.Partitions.Newest != parts[len(parts)-1]) {
		t.Errorf("status.partitions = %+v; want ahead >= 4, oldest %s, newest %s", st.Partitions, parts[0], parts[len(parts)-1])
	}
	now := te.clock.Now()
	if st.Window == nil || !st.Window.From.Time.Before(now.Add(-336*time.Hour+time.Nanosecond)) || !st.Window.To.Time.After(now.Add(4*24*time.Hour)) {
		t.Errorf("status.window = %+v does not cover [now-336h, now+4d] (now %s)", st.Window, now)
	}
	if st.Table != "billing.processed_event" || st.DeploymentName != "billing-consumer" || st.Replicas != 3 || st.Selector == "" {
		t.Errorf("status table %q, deployment %q, replicas %d, selector %q", st.Table, st.DeploymentName, st.Replicas, st.Selector)
	}
	if st.LastMaintenanceTime == nil || st.NextMaintenanceTime == nil || !st.NextMaintenanceTime.After(now) {
		t.Errorf("maintenance times: last %v next %v (now %s)", st.LastMaintenanceTime, st.NextMaintenanceTime, now)
	}
	for _, ct := range []string{kafkav1alpha1.ConditionDatabaseReady, kafkav1alpha1.ConditionPartitionsReady, kafkav1alpha1.ConditionConsumerReady} {
		if c := got.GetCondition(ct); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("condition %s = %+v, want True", ct, c)
		}
	}
	for _, ct := range []string{kafkav1alpha1.ConditionReconciling, kafkav1alpha1.ConditionStalled} {
		if c := got.GetCondition(ct); c != nil {
			t.Errorf("condition %s present on a ready object: %+v", ct, c)
		}
	}

	// The Deployment.
	dep := &appsv1.Deployment{}
	if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "billing-consumer"}, dep); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(dep, got) {
		t.Errorf("Deployment owner references %+v do not name the object as controller", dep.OwnerReferences)
	}
	if *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	wantValues := map[string]string{
		envvars.Brokers:             "kafka-0.kafka.kafka.svc:9093,kafka-1.kafka.kafka.svc:9093,kafka-2.kafka.kafka.svc:9093",
		envvars.Topic:               "billing.payments",
		envvars.Group:               "billing-charger",
		envvars.DeadLetterTopic:     "billing.payments.dlq",
		envvars.TableSchema:         "billing",
		envvars.TableName:           "processed_event",
		envvars.DedupScope:          "ConsumerGroup",
		envvars.BatchMaxMessages:    "200",
		envvars.BatchMaxWait:        "100ms",
		envvars.PolicyOutsideWindow: "DeadLetter",
		envvars.Sink:                "http",
		envvars.SinkHTTPURL:         "https://payments.internal.example/v1/charges",
		envvars.SinkHTTPTimeout:     "5s",
		envvars.SASLMechanism:       "SCRAM-SHA-512",
		envvars.TLSEnabled:          "true",
		envvars.TLSCAFile:           "/etc/idempotency/kafka-tls/kafka-tls-ca/ca.crt",
		envvars.Ordering:            "Key",
		envvars.MaxInFlight:         "64",
	}
	// The container's memory limit, through the downward API (the API
	// server checks the container name and the resource).
	if r := env[envvars.MemoryLimit].ValueFrom; r == nil || r.ResourceFieldRef == nil ||
		r.ResourceFieldRef.ContainerName != c.Name || r.ResourceFieldRef.Resource != "limits.memory" {
		t.Errorf("env %s = %+v, want the container's limits.memory", envvars.MemoryLimit, env[envvars.MemoryLimit])
	}
	for name, want := range wantValues {
		if got := env[name]; got.Value != want || got.ValueFrom != nil {
			t.Errorf("env %s = %+v, want value %q", name, got, want)
		}
	}
	wantRefs := map[string][2]string{
		envvars.DatabaseURL:           {"billing-db", "url"},
		envvars.SASLUsername:          {"billing-kafka", "username"},
		envvars.SASLPassword:          {"billing-kafka", "password"},
		envvars.SinkHTTPAuthorization: {"billing-sink", "authorization"},
	}
	for name, want := range wantRefs {
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Name != want[0] || e.ValueFrom.SecretKeyRef.Key != want[1] {
			t.Errorf("env %s = %+v, want secretKeyRef %s/%s", name, e, want[0], want[1])
		}
	}
	for _, e := range c.Env {
		if strings.Contains(e.Value, password) || strings.Contains(e.Value, "postgres://") {
			t.Errorf("env %s carries a credential in plain text", e.Name)
		}
	}
	assertRestricted(t, pod)
	if pod.Containers[0].Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("resources %+v, want the sample's", pod.Containers[0].Resources)
	}
	if dep.Spec.Template.Annotations[objects.AnnotationConfigHash] == "" {
		t.Error("pod template has no config hash annotation")
	}
	if !te.hasEvents(t, ns, obj.Name, "PartitionsCreated") {
		t.Error("no PartitionsCreated Event")
	}
	assertNoSecretLeak(t, te, ns, password)
}

// assertRestricted checks the pod against the Pod Security Standards
// "restricted" profile's rules.
func assertRestricted(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || !ptrTrue(psc.RunAsNonRoot) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v is not restricted", psc)
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Error("pod uses host namespaces")
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a hostPath", v.Name)
		}
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
			(sc.Privileged != nil && *sc.Privileged) || !ptrTrue(sc.ReadOnlyRootFilesystem) {
			t.Errorf("container %s securityContext %+v is not restricted", c.Name, sc)
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Errorf("container %s lacks probes", c.Name)
		}
	}
}

func ptrTrue(b *bool) bool { return b != nil && *b }

// assertNoSecretLeak checks that no captured log line, no Event and no
// condition in the namespace contains the secret.
func assertNoSecretLeak(t *testing.T, te *testEnv, ns string, secrets ...string) {
	t.Helper()
	logs := te.logs.String()
	var list kafkav1alpha1.IdempotentConsumerList
	if err := te.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(logs, s) {
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, s) {
					t.Errorf("a log line contains a secret: %.300s", line)
				}
			}
		}
		for _, obj := range list.Items {
			for _, c := range obj.Status.Conditions {
				if strings.Contains(c.Message, s) {
					t.Errorf("condition %s of %s contains a secret", c.Type, obj.Name)
				}
			}
			for _, e := range te.events(t, ns, obj.Name) {
				if strings.Contains(e.Note, s) {
					t.Errorf("event %s of %s contains a secret", e.Reason, obj.Name)
				}
			}
		}
	}
}

func testScheduleMovesPartitions(t *testing.T, te *testEnv) {
	ctx := context.Background()
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	obj := newConsumer(ns, "orders", withRetention(48*time.Hour), withPremake(2))
	te.create(t, obj)
	te.waitReady(t, ns, obj.Name)
	conn := pgConn(t, dbURL)
	before := partitions(t, conn, "public", "processed_event")

	lead := te.r.Options.MaintenanceLead
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: obj.Name}}
	checkRequeue := func() {
		t.Helper()
		now := te.clock.Now().UTC()
		res, err := te.r.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		// Retention is a whole number of days, so the next change is the
		// next midnight (UTC) minus the lead: a new partition is due.
		next := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).Add(24 * time.Hour)
		if !now.Add(lead).Before(next) {
			next = next.Add(24 * time.Hour)
		}
		schedule := next.Add(-lead).Sub(now)
		if nm := te.get(t, ns, obj.Name).Status.NextMaintenanceTime; nm == nil || !nm.Time.Equal(next.Add(-lead)) {
			t.Errorf("nextMaintenanceTime = %v at %s, want %s (next boundary %s minus lead %s)", nm, now, next.Add(-lead), next, lead)
		}
		// The object's brokers (kafka-0.kafka, answered by clusterBrokers)
		// have its topics: the topic check is repeated within
		// TopicCheckInterval, hours before the schedule.
		recheck := te.topicRecheckIn(t, ns, obj.Name, now)
		if recheck <= 0 || recheck > te.r.Options.TopicCheckInterval {
			t.Errorf("topic recheck in %s, want within the check interval %s", recheck, te.r.Options.TopicCheckInterval)
		}
		if want := min(schedule, recheck); res.RequeueAfter != want {
			t.Errorf("RequeueAfter = %s at %s, want %s: the earlier of the schedule (next boundary %s minus lead %s: %s) and the topic recheck (%s)",
				res.RequeueAfter, now, want, next, lead, schedule, recheck)
		}
	}
	checkRequeue()

	// Three days later: three new partitions ahead, three expired ones gone.
	te.clock.SetTime(te.clock.Now().Add(72 * time.Hour))
	te.poke(t, ns, obj.Name)
	now := te.clock.Now().UTC()
	var want []string
	for d := dedup.Daily.Floor(now.Add(-48 * time.Hour)); !d.After(dedup.Daily.Floor(now).Add(2 * 24 * time.Hour)); d = d.Add(24 * time.Hour) {
		want = append(want, dedup.PartitionName("processed_event", dedup.Daily, d))
	}
	var after []string
	eventually(t, 30*time.Second, "partitions to move forward: "+strings.Join(want, ","), func() (bool, string) {
		after = partitions(t, conn, "public", "processed_event")
		return slices.Equal(after, want), strings.Join(after, ",")
	})
	if slices.Equal(before, after) {
		t.Fatalf("partitions did not move: %v", after)
	}
	newest, _ := dedup.ParsePartitionName("processed_event", dedup.Daily, after[len(after)-1])
	got := te.waitCondition(t, ns, obj.Name, kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
	eventually(t, 10*time.Second, "status to show the moved window", func() (bool, string) {
		got = te.get(t, ns, obj.Name)
		w := got.Status.Window
		return w != nil && !w.From.Time.After(now.Add(-48*time.Hour)) && w.To.Time.After(now.Add(48*time.Hour)) &&
			got.Status.Partitions != nil && int(got.Status.Partitions.Count) == len(after), conditionsSummary(got)
	})
	if got.Status.LastMaintenanceTime == nil || got.Status.LastMaintenanceTime.Time.Before(now.Add(-time.Second)) {
		t.Errorf("lastMaintenanceTime %v, want about %s", got.Status.LastMaintenanceTime, now)
	}
	if !te.hasEvents(t, ns, obj.Name, "PartitionsCreated", "PartitionsDropped") {
		t.Errorf("want PartitionsCreated and PartitionsDropped Events, got %d events", len(te.events(t, ns, obj.Name)))
	}
	checkRequeue()

	// Just before the next boundary minus the lead nothing is due, and the
	// schedule is the earlier wake-up (the topic recheck is at least
	// TopicRetryBase away); at it, the next partition is created ahead of time.
	next := te.get(t, ns, obj.Name).Status.NextMaintenanceTime.Time
	te.clock.SetTime(next.Add(-30 * time.Second))
	res, err := te.r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != 30*time.Second {
		t.Errorf("RequeueAfter = %s 30s before the scheduled maintenance, want 30s", res.RequeueAfter)
	}
	if early := partitions(t, conn, "public", "processed_event"); !slices.Equal(early, after) {
		t.Errorf("partitions changed before the scheduled time: %v, were %v", early, after)
	}
	te.clock.SetTime(next)
	if _, err := te.r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	latest := partitions(t, conn, "public", "processed_event")
	newest2, _ := dedup.ParsePartitionName("processed_event", dedup.Daily, latest[len(latest)-1])
	if !newest2.After(newest) {
		t.Errorf("at the scheduled time %s the newest partition is still %s", next, latest[len(latest)-1])
	}
}

func testSpecUpdates(t *testing.T, te *testEnv) {
	ctx := context.Background()
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	obj := newConsumer(ns, "payments", withRetention(48*time.Hour), withPremake(2))
	te.create(t, obj)
	ready := te.waitReady(t, ns, obj.Name)
	count := ready.Status.Partitions.Count

	if err := te.update(t, ns, obj.Name, func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Consumer.Replicas = ptr32(3)
		o.Spec.Consumer.Sink = kafkav1alpha1.SinkSpec{Type: kafkav1alpha1.SinkHTTP, HTTP: &kafkav1alpha1.HTTPSinkSpec{URL: "https://example.test/hook"}}
		o.Spec.Dedup.Retention = &metav1.Duration{Duration: 96 * time.Hour}
	}); err != nil {
		t.Fatal(err)
	}
	got := te.waitReady(t, ns, obj.Name)
	if got.Status.Partitions.Count < count+2 {
		t.Errorf("retention 48h -> 96h: partitions %d -> %d, want at least 2 more", count, got.Status.Partitions.Count)
	}
	dep := &appsv1.Deployment{}
	if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: objects.DeploymentName(obj)}, dep); err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 3 {
		t.Errorf("replicas = %d, want 3", *dep.Spec.Replicas)
	}
	env := envMap(dep.Spec.Template.Spec.Containers[0].Env)
	if env[envvars.Sink] != "http" || env[envvars.SinkHTTPURL] != "https://example.test/hook" {
		t.Errorf("sink env = %q %q, want http and the URL", env[envvars.Sink], env[envvars.SinkHTTPURL])
	}
	if got.Status.Replicas != 3 {
		t.Errorf("status.replicas = %d, want 3", got.Status.Replicas)
	}

	// The scale subresource (kubectl scale, HPA) drives spec.consumer.replicas.
	scale := &autoscalingv1.Scale{}
	if err := te.c.SubResource("scale").Get(ctx, got, scale); err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 3 || scale.Status.Selector == "" {
		t.Errorf("scale = %+v, want 3 replicas and a selector", scale)
	}
	scale.Spec.Replicas = 1
	if err := te.c.SubResource("scale").Update(ctx, got, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Deployment scaled to 1", func() (bool, string) {
		_ = te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: objects.DeploymentName(obj)}, dep)
		return *dep.Spec.Replicas == 1, ""
	})

	// A changed Secret value rolls the pods (new config hash).
	hash := dep.Spec.Template.Annotations[objects.AnnotationConfigHash]
	te.setSecret(t, ns, "db", map[string]string{"url": dbURL + "&application_name=rotated"})
	eventually(t, 30*time.Second, "config hash to change after the Secret changed", func() (bool, string) {
		_ = te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: objects.DeploymentName(obj)}, dep)
		return dep.Spec.Template.Annotations[objects.AnnotationConfigHash] != hash, hash
	})
}

func ptr32(v int32) *int32 { return &v }

func envMap(env []corev1.EnvVar) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return m
}

func testImmutableFields(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	obj := newConsumer(ns, "immutable")
	te.create(t, obj)
	for _, tc := range []struct {
		name   string
		mutate func(*kafkav1alpha1.IdempotentConsumer)
		want   string
	}{
		{"interval", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Dedup.Interval = kafkav1alpha1.IntervalHourly }, "interval is immutable"},
		{"scope", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Dedup.Scope = kafkav1alpha1.ScopeGlobal }, "scope is immutable"},
		{"schema", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.Schema = "other" }, "schema is immutable"},
		{"table", func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Database.Table = "other" }, "table is immutable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := te.update(t, ns, obj.Name, tc.mutate)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("update of %s: got %v, want Invalid with %q", tc.name, err, tc.want)
			}
		})
	}
	// Mutable fields next to them still change.
	if err := te.update(t, ns, obj.Name, func(o *kafkav1alpha1.IdempotentConsumer) { o.Spec.Dedup.Premake = 7 }); err != nil {
		t.Fatalf("premake is mutable: %v", err)
	}
}
