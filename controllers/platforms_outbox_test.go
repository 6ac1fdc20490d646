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
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// newPlatformOutbox is newOutbox with each modifier applied.
func newPlatformOutbox(ns, name string, mods ...func(*kafkav1alpha1.Outbox)) *kafkav1alpha1.Outbox {
	o := newOutbox(ns, name, []string{"kafka-0.kafka:9092"}, "orders")
	for _, m := range mods {
		m(o)
	}
	return o
}

func outboxCNPG(cluster string) func(*kafkav1alpha1.Outbox) {
	return func(o *kafkav1alpha1.Outbox) {
		o.Spec.Database.URLSecretRef = kafkav1alpha1.SecretKeyRef{}
		o.Spec.Database.CloudNativePG = &kafkav1alpha1.OutboxCloudNativePGSpec{CloudNativePGCluster: kafkav1alpha1.CloudNativePGCluster{Cluster: cluster}}
	}
}

func outboxStrimzi(cluster string) func(*kafkav1alpha1.Outbox) {
	return func(o *kafkav1alpha1.Outbox) {
		o.Spec.Kafka.BootstrapServers = nil
		o.Spec.Kafka.Strimzi = &kafkav1alpha1.StrimziCluster{Cluster: cluster}
	}
}

// relayContainer waits for the Outbox's relay Deployment and returns its
// container, its env by name, and its Secret volumes as volume name ->
// "secret/key" (or "secret" for a whole Secret).
func (te *testEnv) relayContainer(t *testing.T, ns, name string) (corev1.Container, map[string]corev1.EnvVar, map[string]string) {
	t.Helper()
	var dep appsv1.Deployment
	eventually(t, 30*time.Second, "the relay Deployment of "+name, func() (bool, string) {
		if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name + "-outbox-relay"}, &dep); err != nil {
			return false, err.Error() + "; " + outboxConditions(te.getOutbox(t, ns, name))
		}
		return true, ""
	})
	ctr := dep.Spec.Template.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	vols := map[string]string{}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		src := v.Secret.SecretName
		if len(v.Secret.Items) == 1 {
			src += "/" + v.Secret.Items[0].Key
		}
		vols[v.Name] = src
	}
	return ctr, env, vols
}

func secretRefOf(e corev1.EnvVar) string {
	if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		return ""
	}
	return e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
}

// TestPlatformsOutbox: an Outbox naming CloudNativePG or Strimzi before
// their CRDs exist says PlatformKindAbsent; then a missing Cluster, Secret
// or Kafka gives its specific reason in DatabaseReady or KafkaReady (and
// Ready). With CloudNativePG the DDL runs through the Cluster's "-app"
// Secret, verified with its "-ca" (the table is made), and the relay gets
// the same URL and CA, or with relayRole its own URL in the derived Secret
// and the relay grants; a transaction-mode Pooler is refused. With Strimzi
// the operator keeps a KafkaUser for the relay with exactly the producer's
// ACLs on the outbox's topics, creates no KafkaTopic, and the relay gets
// the listener's bootstrap servers, SCRAM through the KafkaUser's Secret
// and the cluster CA.
func TestPlatformsOutbox(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	ca, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := consumertest.StartPostgres(consumertest.WithTLS(ca, "localhost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	te := startEnv(t, envOptions{realClock: true})
	ns := te.namespace(t)
	ctx := context.Background()
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})

	te.create(t, newPlatformOutbox(ns, "shop", outboxCNPG("pg")))
	te.create(t, newPlatformOutbox(ns, "relay-k", outboxStrimzi("kc"), func(o *kafkav1alpha1.Outbox) {
		o.Spec.Kafka.Topics = []string{"orders", "payments"}
	}))
	te.waitOutbox(t, ns, "shop", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformKindAbsent)
	te.waitOutbox(t, ns, "relay-k", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformKindAbsent)
	te.waitOutbox(t, ns, "relay-k", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformKindAbsent)

	if _, err := envtest.InstallCRDs(te.cfg.Config, platformCRDs); err != nil {
		t.Fatal(err)
	}

	t.Run("CloudNativePG", func(t *testing.T) {
		te.waitOutbox(t, ns, "shop", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonCNPGClusterNotFound, `"pg"`)
		te.platformObject(t, cnpgClusterGVK, ns, "pg", map[string]any{"instances": int64(1)}, map[string]any{"writeService": "pg-rw"})
		te.waitOutbox(t, ns, "shop", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonCNPGSecretNotFound, `"pg-app"`)
		te.secret(t, ns, "pg-app", map[string]string{
			"uri": pg.TLSURL("postgres", "localhost", ""), "host": "localhost", "port": "5432",
			"dbname": "postgres", "username": "app", "password": "not-used",
		})
		te.waitOutbox(t, ns, "shop", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonCNPGSecretNotFound, `"pg-ca"`)
		te.secret(t, ns, "pg-ca", map[string]string{"ca.crt": ca.PEM})
		o := te.waitOutbox(t, ns, "shop", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
		want := &kafkav1alpha1.PlatformDatabaseStatus{OwnerSecret: "pg-app", CASecret: "pg-ca", DDLEndpoint: "localhost:5432"}
		if o.Status.Platform == nil || !reflect.DeepEqual(o.Status.Platform.Database, want) || o.Status.Platform.Kafka != nil {
			t.Errorf("status.platform %+v, want database %+v", o.Status.Platform, want)
		}
		if !tableExists(t, pgConn(t, pg.URL("postgres")), "public", "shop_outbox") {
			t.Error("the outbox table was not made in the Cluster's database")
		}
		_, env, vols := te.relayContainer(t, ns, "shop")
		if got := secretRefOf(env[envvars.DatabaseURL]); got != "pg-app/uri" {
			t.Errorf("relay %s from %q, want pg-app/uri (the owner, as a consumer without consumerRole)", envvars.DatabaseURL, got)
		}
		var caVol bool
		for _, src := range vols {
			caVol = caVol || strings.HasPrefix(src, "pg-ca")
		}
		if !caVol {
			t.Errorf("the relay does not mount the cluster CA pg-ca: %v", vols)
		}
		cl, err := te.getPlatform(t, cnpgClusterGVK, ns, "pg")
		if err != nil || cl.GetGeneration() != 1 || len(cl.GetOwnerReferences()) != 0 {
			t.Errorf("Cluster changed: generation %d owners %v err %v", cl.GetGeneration(), cl.GetOwnerReferences(), err)
		}
	})

	t.Run("CloudNativePGRelayRole", func(t *testing.T) {
		conn := pgConn(t, pg.URL("postgres"))
		if _, err := conn.Exec(ctx, `CREATE ROLE shop_relay LOGIN`); err != nil {
			t.Fatal(err)
		}
		te.create(t, newPlatformOutbox(ns, "roled", outboxCNPG("pg"), func(o *kafkav1alpha1.Outbox) {
			o.Spec.Database.CloudNativePG.RelayRole = &kafkav1alpha1.CloudNativePGRole{
				Name: "shop_relay", SecretRef: kafkav1alpha1.LocalObjectName{Name: "shop-relay-role"}}
		}))
		te.waitOutbox(t, ns, "roled", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonCNPGSecretNotFound, `"shop-relay-role"`, "relay role")
		te.secret(t, ns, "shop-relay-role", map[string]string{"username": "shop_relay", "password": "role-pw"})
		o := te.waitOutbox(t, ns, "roled", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
		if o.Status.RelayRole != "shop_relay" {
			t.Errorf("status.relayRole %q, want shop_relay (granted the relay's privileges)", o.Status.RelayRole)
		}
		want := &kafkav1alpha1.PlatformDatabaseStatus{OwnerSecret: "pg-app", CASecret: "pg-ca", DDLEndpoint: "localhost:5432",
			ConsumerSecret: "shop-relay-role", ConsumerEndpoint: "localhost:5432"}
		if o.Status.Platform == nil || !reflect.DeepEqual(o.Status.Platform.Database, want) {
			t.Errorf("status.platform %+v, want database %+v", o.Status.Platform, want)
		}
		_, env, _ := te.relayContainer(t, ns, "roled")
		if got := secretRefOf(env[envvars.DatabaseURL]); got != "roled-outbox-platform/uri" {
			t.Errorf("relay %s from %q, want roled-outbox-platform/uri", envvars.DatabaseURL, got)
		}
		var sec corev1.Secret
		if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "roled-outbox-platform"}, &sec); err != nil {
			t.Fatal(err)
		}
		if c := metav1.GetControllerOf(&sec); c == nil || c.UID != o.UID || c.Kind != "Outbox" {
			t.Errorf("the derived Secret's controller %+v, want the Outbox", c)
		}
		u, err := url.Parse(string(sec.Data["uri"]))
		if err != nil {
			t.Fatal(err)
		}
		if pw, _ := u.User.Password(); u.User.Username() != "shop_relay" || pw != "role-pw" || u.Host != "localhost:5432" || u.Path != "/postgres" {
			t.Errorf("relay URL user %q host %q path %q: want shop_relay on the rw endpoint", u.User.Username(), u.Host, u.Path)
		}
		var canSelect bool
		if err := conn.QueryRow(ctx, `SELECT has_table_privilege('shop_relay', 'public.roled_outbox', 'SELECT')`).Scan(&canSelect); err != nil || !canSelect {
			t.Errorf("shop_relay may SELECT the outbox: %v (err %v)", canSelect, err)
		}
	})

	t.Run("CloudNativePGTransactionPoolerRefused", func(t *testing.T) {
		te.platformObject(t, cnpgPoolerGVK, ns, "pg-pooler-tx", map[string]any{
			"cluster": map[string]any{"name": "pg"}, "instances": int64(1), "type": "rw",
			"pgbouncer": map[string]any{"poolMode": "transaction"},
		}, nil)
		te.create(t, newPlatformOutbox(ns, "pooled", outboxCNPG("pg"), func(o *kafkav1alpha1.Outbox) {
			o.Spec.Database.CloudNativePG.Pooler = "pg-pooler-tx"
		}))
		te.waitOutbox(t, ns, "pooled", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonInvalidSpec, "session mode")
		te.waitOutbox(t, ns, "pooled", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonInvalidSpec)
		var dep appsv1.Deployment
		if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "pooled-outbox-relay"}, &dep); err == nil {
			t.Error("a relay Deployment was made for a transaction-mode Pooler")
		}
	})

	t.Run("Strimzi", func(t *testing.T) {
		te.waitOutbox(t, ns, "relay-k", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaClusterNotFound, `"kc"`)
		bootstrap := "kc-kafka-bootstrap." + ns + ".svc:9093"
		te.platformObject(t, strimziKafkaGVK, ns, "kc", map[string]any{}, map[string]any{"listeners": []any{
			map[string]any{"name": "plain", "bootstrapServers": "kc-kafka-bootstrap." + ns + ".svc:9092"},
			map[string]any{"name": "tls", "bootstrapServers": bootstrap},
		}})
		te.waitOutbox(t, ns, "relay-k", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaUserNotReady, `"relay-k-outbox-relay"`)
		o := te.getOutbox(t, ns, "relay-k")

		user, err := te.getPlatform(t, strimziUserGVK, ns, "relay-k-outbox-relay")
		if err != nil {
			t.Fatal(err)
		}
		if c := metav1.GetControllerOf(user); c == nil || c.UID != o.UID || c.Kind != "Outbox" || c.BlockOwnerDeletion == nil || !*c.BlockOwnerDeletion {
			t.Errorf("KafkaUser controller %+v, want the Outbox with blockOwnerDeletion", c)
		}
		if l := user.GetLabels()["strimzi.io/cluster"]; l != "kc" {
			t.Errorf("KafkaUser label strimzi.io/cluster=%q", l)
		}
		spec, _ := json.Marshal(user.Object["spec"])
		wantSpec := `{"authentication":{"type":"scram-sha-512"},"authorization":{"acls":[` +
			`{"host":"*","operations":["Write","Describe","DescribeConfigs"],"resource":{"name":"orders","patternType":"literal","type":"topic"}},` +
			`{"host":"*","operations":["Write","Describe","DescribeConfigs"],"resource":{"name":"payments","patternType":"literal","type":"topic"}}` +
			`],"type":"simple"}}`
		if string(spec) != wantSpec {
			t.Errorf("KafkaUser spec\n got %s\nwant %s", spec, wantSpec)
		}
		topics := &unstructured.UnstructuredList{}
		topics.SetGroupVersionKind(strimziTopicGVK.GroupVersion().WithKind("KafkaTopicList"))
		if err := te.c.List(ctx, topics, client.InNamespace(ns)); err != nil || len(topics.Items) != 0 {
			t.Errorf("KafkaTopics %d (err %v): an Outbox's topics are the application's, none is made", len(topics.Items), err)
		}

		// The User Operator makes the Secret and reports Ready.
		te.secret(t, ns, "relay-k-outbox-relay", map[string]string{"password": "scram-password"})
		te.secret(t, ns, "kc-cluster-ca-cert", map[string]string{"ca.crt": ca.PEM})
		user.Object["status"] = map[string]any{"username": "relay-k-outbox-relay", "secret": "relay-k-outbox-relay",
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
		if err := te.c.Status().Update(ctx, user); err != nil {
			t.Fatal(err)
		}
		o = te.waitOutbox(t, ns, "relay-k", kafkav1alpha1.ConditionReady, metav1.ConditionTrue, kafkav1alpha1.ReasonReady)
		wantKafka := &kafkav1alpha1.PlatformKafkaStatus{KafkaUser: "relay-k-outbox-relay", CASecret: "kc-cluster-ca-cert", BootstrapServers: bootstrap}
		if p := o.Status.Platform; p == nil || !reflect.DeepEqual(p.Kafka, wantKafka) || p.Database != nil {
			t.Errorf("status.platform %+v, want kafka %+v", p, wantKafka)
		}
		if c := o.GetCondition(kafkav1alpha1.ConditionKafkaReady); c == nil || !strings.Contains(c.Message, bootstrap) {
			t.Errorf("KafkaReady %+v does not name the resolved brokers", c)
		}

		ctr, env, vols := te.relayContainer(t, ns, "relay-k")
		if b := env[envvars.Brokers].Value; b != bootstrap {
			t.Errorf("%s %q, want the tls listener's bootstrap %q", envvars.Brokers, b, bootstrap)
		}
		if m, tls := env["CONSUMER_SASL_MECHANISM"].Value, env["CONSUMER_TLS_ENABLED"].Value; m != "SCRAM-SHA-512" || tls != "true" {
			t.Errorf("SASL mechanism %q, TLS %q", m, tls)
		}
		refs := map[string]bool{}
		for _, e := range ctr.Env {
			if r := secretRefOf(e); r != "" {
				refs[r] = true
			}
			if strings.Contains(e.Value, "scram-password") {
				t.Errorf("env %s holds the SCRAM password in clear", e.Name)
			}
		}
		if !refs["relay-k-outbox-relay/password"] || !refs["relay-k-outbox-platform/username"] || !refs["db/url"] {
			t.Errorf("relay env Secret refs %v: want the KafkaUser's password, the derived username and db/url", refs)
		}
		if vols["kafka-tls-ca"] != "kc-cluster-ca-cert/ca.crt" {
			t.Errorf("kafka-tls-ca from %q, want kc-cluster-ca-cert/ca.crt (volumes %v)", vols["kafka-tls-ca"], vols)
		}
		var sec corev1.Secret
		if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "relay-k-outbox-platform"}, &sec); err != nil {
			t.Fatal(err)
		}
		if string(sec.Data["username"]) != "relay-k-outbox-relay" || len(sec.Data) != 1 {
			t.Errorf("derived Secret keys %v, want only username", keysOf(sec.Data))
		}
		// The spec was never written: the resolved refs live in memory.
		if o.Spec.Kafka.BootstrapServers != nil || o.Spec.Kafka.SASL != nil || o.Spec.Kafka.TLS != nil {
			t.Errorf("the Outbox's spec was written: %+v", o.Spec.Kafka)
		}
	})

	t.Run("UserOwnedKafkaUserIsNotOverwritten", func(t *testing.T) {
		te.platformObject(t, strimziUserGVK, ns, "mine-outbox-relay", map[string]any{"authentication": map[string]any{"type": "tls"}}, nil)
		te.create(t, newPlatformOutbox(ns, "mine", outboxStrimzi("kc")))
		te.waitOutbox(t, ns, "mine", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformObjectNotOwned, "mine-outbox-relay")
		u, err := te.getPlatform(t, strimziUserGVK, ns, "mine-outbox-relay")
		if err != nil || u.GetGeneration() != 1 || len(u.GetOwnerReferences()) != 0 {
			t.Errorf("user's KafkaUser changed: generation %d owners %v err %v", u.GetGeneration(), u.GetOwnerReferences(), err)
		}
	})
}

// TestOutboxPlatformSecrets: the Secrets an Outbox's platform integrations
// read wake it when they change or appear (the Secret watch maps them to
// it), and no other Outbox.
func TestOutboxPlatformSecrets(t *testing.T) {
	ob := newPlatformOutbox("ns", "shop", outboxCNPG("pg"), outboxStrimzi("kc"), func(o *kafkav1alpha1.Outbox) {
		o.Spec.Database.CloudNativePG.RelayRole = &kafkav1alpha1.CloudNativePGRole{Name: "shop_relay",
			SecretRef: kafkav1alpha1.LocalObjectName{Name: "shop-relay-role"}}
	})
	got := outboxPlatform(ob).secretNames()
	want := []string{"pg-app", "pg-ca", "shop-relay-role", "shop-outbox-relay", "kc-cluster-ca-cert", "shop-outbox-platform"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("secretNames = %v, want %v", got, want)
	}
	if got := outboxPlatform(newOutbox("ns", "plain", []string{"kafka:9092"}, "orders")).secretNames(); len(got) != 0 {
		t.Errorf("an Outbox without platforms reads platform Secrets %v", got)
	}
	r := &OutboxReconciler{Client: fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(ob, newOutbox("ns", "plain", []string{"kafka:9092"}, "orders")).Build()}
	for _, name := range want {
		reqs := r.outboxesOfSecret(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}})
		if len(reqs) != 1 || reqs[0].Name != "shop" {
			t.Errorf("Secret %s wakes %v, want only ns/shop", name, reqs)
		}
	}
}

// setKafkaUserReady writes a KafkaUser's status as the User Operator would,
// for its current generation.
// strimziEnv starts an environment with the stand-in platform CRDs and a
// Strimzi Kafka "kc" (strimziKafka) in a fresh namespace.
func strimziEnv(t *testing.T, eo envOptions) (*testEnv, string, *consumertest.TestCA) {
	t.Helper()
	ca, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	te := startEnv(t, eo)
	ns := te.namespace(t)
	if _, err := envtest.InstallCRDs(te.cfg.Config, platformCRDs); err != nil {
		t.Fatal(err)
	}
	te.strimziKafka(t, ns, ca)
	return te, ns, ca
}

// strimziKafka makes the stand-in Strimzi Kafka "kc" with a "tls" listener
// and its cluster CA Secret.
func (te *testEnv) strimziKafka(t *testing.T, ns string, ca *consumertest.TestCA) {
	t.Helper()
	te.platformObject(t, strimziKafkaGVK, ns, "kc", map[string]any{}, map[string]any{"listeners": []any{
		map[string]any{"name": "tls", "bootstrapServers": "kc-kafka-bootstrap." + ns + ".svc:9093"}}})
	te.secret(t, ns, "kc-cluster-ca-cert", map[string]string{"ca.crt": ca.PEM})
}

func setKafkaUserReady(t *testing.T, te *testEnv, ns, name, ready string) {
	t.Helper()
	user, err := te.getPlatform(t, strimziUserGVK, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	user.Object["status"] = map[string]any{"username": name, "secret": name, "observedGeneration": user.GetGeneration(),
		"conditions": []any{map[string]any{"type": "Ready", "status": ready}}}
	if err := te.c.Status().Update(context.Background(), user); err != nil {
		t.Fatal(err)
	}
}

// TestPlatformsOutboxKafkaWaitKeepsTheDatabase: Strimzi's User Operator
// marks a KafkaUser not Ready while it cannot reach the brokers. That wait
// holds only the Kafka side of an Outbox: the database phases go on (an
// emitter role added meanwhile is granted), as for a broker that is down
// without Strimzi. A suspended Outbox says Suspended, not a platform wait.
// (A review found both: the grant was never made, and a suspended Outbox
// said KafkaUserNotReady.)
func TestPlatformsOutboxKafkaWaitKeepsTheDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te, ns, _ := strimziEnv(t, envOptions{realClock: true})
	ctx := context.Background()
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	te.create(t, newPlatformOutbox(ns, "rk", outboxStrimzi("kc")))
	te.waitOutbox(t, ns, "rk", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaUserNotReady)
	te.secret(t, ns, "rk-outbox-relay", map[string]string{"password": "pw"})
	setKafkaUserReady(t, te, ns, "rk-outbox-relay", "True")
	te.waitOutbox(t, ns, "rk", kafkav1alpha1.ConditionRelayReady, metav1.ConditionTrue, "")

	setKafkaUserReady(t, te, ns, "rk-outbox-relay", "False")
	te.waitOutbox(t, ns, "rk", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaUserNotReady)
	conn := pgConn(t, dbURL)
	role := "late_emitter_" + strings.ReplaceAll(ns, "-", "_")
	if _, err := conn.Exec(ctx, `CREATE ROLE `+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role) })
	if err := te.updateOutbox(t, ns, "rk", func(o *kafkav1alpha1.Outbox) { o.Spec.Database.EmitterRoles = []string{role} }); err != nil {
		t.Fatal(err)
	}
	o := te.getOutbox(t, ns, "rk")
	// The grant, then the status that reports it (written after the grant).
	eventually(t, 30*time.Second, "the emitter role granted (and in status.emitterRoles) while the KafkaUser is not Ready", func() (bool, string) {
		var can bool
		if err := conn.QueryRow(ctx, `SELECT has_any_column_privilege($1, $2, 'INSERT')`, role, o.Status.Table).Scan(&can); err != nil {
			return false, err.Error()
		}
		cur := te.getOutbox(t, ns, "rk")
		return can && reflect.DeepEqual(cur.Status.EmitterRoles, []string{role}),
			fmt.Sprintf("granted %v; emitterRoles %v; %s", can, cur.Status.EmitterRoles, outboxConditions(cur))
	})

	if err := te.updateOutbox(t, ns, "rk", func(o *kafkav1alpha1.Outbox) { o.Spec.Suspend = true }); err != nil {
		t.Fatal(err)
	}
	te.waitOutbox(t, ns, "rk", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonSuspended)
}

// TestPlatformsDerivedSecretClash: an Outbox "shop" and an
// IdempotentConsumer "shop-outbox" both want the Secret
// "shop-outbox-platform". The second says so in a condition naming the
// Secret's controller (it was a bare reconcile error, in the log only).
func TestPlatformsDerivedSecretClash(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest: skipped with -short")
	}
	te := startEnv(t, envOptions{realClock: true})
	ns := te.namespace(t)
	ctx := context.Background()
	if _, err := envtest.InstallCRDs(te.cfg.Config, platformCRDs); err != nil {
		t.Fatal(err)
	}
	te.platformObject(t, cnpgClusterGVK, ns, "pg", map[string]any{"instances": int64(1)}, map[string]any{"writeService": "pg-rw"})
	te.secret(t, ns, "pg-app", map[string]string{"uri": "postgresql://app:x@127.0.0.1:1/app", "host": "127.0.0.1", "port": "1",
		"dbname": "app", "username": "app", "password": "x"})
	te.secret(t, ns, "pg-ca", map[string]string{"ca.crt": "x"})
	te.secret(t, ns, "relay-role", map[string]string{"username": "shop_relay", "password": "relay-pw"})
	te.secret(t, ns, "cons-role", map[string]string{"username": "shop_consumer", "password": "cons-pw"})
	te.create(t, newPlatformOutbox(ns, "shop", outboxCNPG("pg"), func(o *kafkav1alpha1.Outbox) {
		o.Spec.Database.CloudNativePG.RelayRole = &kafkav1alpha1.CloudNativePGRole{Name: "shop_relay", SecretRef: kafkav1alpha1.LocalObjectName{Name: "relay-role"}}
	}))
	eventually(t, 30*time.Second, "the Outbox's derived Secret", func() (bool, string) {
		var s corev1.Secret
		err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-outbox-platform"}, &s)
		return err == nil, fmt.Sprint(err)
	})
	te.create(t, newConsumer(ns, "shop-outbox", withCNPG("pg"), func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Database.CloudNativePG.ConsumerRole = &kafkav1alpha1.CloudNativePGRole{Name: "shop_consumer", SecretRef: kafkav1alpha1.LocalObjectName{Name: "cons-role"}}
	}))
	c := te.waitCondition(t, ns, "shop-outbox", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformObjectNotOwned)
	if msg := c.GetCondition(kafkav1alpha1.ConditionReady).Message; !strings.Contains(msg, `"shop-outbox-platform"`) || !strings.Contains(msg, `Outbox "shop"`) {
		t.Errorf("Ready message %q; want it to name the Secret and its controller", msg)
	}
	var s corev1.Secret
	if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-outbox-platform"}, &s); err != nil {
		t.Fatal(err)
	}
	if c := metav1.GetControllerOf(&s); c == nil || c.Kind != "Outbox" || c.Name != "shop" {
		t.Errorf("the Secret's controller is %+v; want the Outbox shop, untouched", c)
	}
}
