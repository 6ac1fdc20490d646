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
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// platformCRDs are the stand-ins for CloudNativePG's and Strimzi's CRDs
// (testdata/platforms, each naming the upstream version it follows).
var platformCRDs = envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "platforms")}, ErrorIfPathMissing: true}

func (te *testEnv) platformObject(t testing.TB, gvk schema.GroupVersionKind, ns, name string, spec, status map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	if err := te.c.Create(context.Background(), u); err != nil {
		t.Fatalf("creating %s %s: %v", gvk.Kind, name, err)
	}
	if status != nil {
		u.Object["status"] = status
		if err := te.c.Status().Update(context.Background(), u); err != nil {
			t.Fatalf("status of %s %s: %v", gvk.Kind, name, err)
		}
	}
	return u
}

func (te *testEnv) getPlatform(t testing.TB, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u)
}

func withCNPG(cluster string) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Database.URLSecretRef = kafkav1alpha1.SecretKeyRef{}
		o.Spec.Database.CloudNativePG = &kafkav1alpha1.CloudNativePGSpec{CloudNativePGCluster: kafkav1alpha1.CloudNativePGCluster{Cluster: cluster}}
	}
}

func withStrimzi(cluster string) func(*kafkav1alpha1.IdempotentConsumer) {
	return func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.BootstrapServers = nil
		o.Spec.Kafka.Strimzi = &kafkav1alpha1.StrimziSpec{StrimziCluster: kafkav1alpha1.StrimziCluster{Cluster: cluster}}
	}
}

func assertControlledBy(t testing.TB, u metav1.Object, owner *kafkav1alpha1.IdempotentConsumer) {
	t.Helper()
	c := metav1.GetControllerOf(u)
	if c == nil || c.UID != owner.UID || c.Kind != "IdempotentConsumer" || c.BlockOwnerDeletion == nil || !*c.BlockOwnerDeletion {
		t.Errorf("%s: controller reference %+v, want the IdempotentConsumer %s with blockOwnerDeletion", u.GetName(), c, owner.UID)
	}
}

// TestPlatformsEnvtest: an object naming CloudNativePG or Strimzi before
// their CRDs exist gets PlatformKindAbsent (and the manager runs); once the
// stand-in CRDs are installed (no restart), a missing Cluster -app Secret is
// CNPGSecretNotFound, then the DDL reaches the (test) PostgreSQL through the
// -app Secret with the cluster CA (verify-full); under Strimzi the operator
// creates a KafkaUser with exactly the consumer's ACLs and the dead-letter
// KafkaTopic, both controlled by the object, waits for the KafkaUser to be
// Ready, and wires its Secret and the cluster CA into the Deployment.
func TestPlatformsEnvtest(t *testing.T) {
	ca, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := consumertest.StartPostgres(consumertest.WithTLS(ca, "localhost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	te := startEnv(t, envOptions{})
	ns := te.namespace(t)
	ctx := context.Background()

	// Without the CRDs: a clear condition, nothing else breaks.
	// Not named "pg": the operator's application Secret "<name>-app" would
	// be CloudNativePG's "pg-app" (ApplicationSecretNotOwned, docs/platforms.md).
	te.create(t, newConsumer(ns, "orders-db", withCNPG("pg")))
	te.waitCondition(t, ns, "orders-db", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformKindAbsent)
	te.secret(t, ns, "db", map[string]string{"url": consumertest.DatabaseURL(t)})
	te.create(t, newConsumer(ns, "k", withStrimzi("kc")))
	te.waitCondition(t, ns, "k", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformKindAbsent)

	if _, err := envtest.InstallCRDs(te.cfg.Config, platformCRDs); err != nil {
		t.Fatal(err)
	}

	t.Run("CloudNativePG", func(t *testing.T) {
		te.waitCondition(t, ns, "orders-db", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonCNPGClusterNotFound)
		te.platformObject(t, cnpgClusterGVK, ns, "pg", map[string]any{"instances": int64(1)}, map[string]any{"writeService": "pg-rw"})
		got := te.waitCondition(t, ns, "orders-db", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonCNPGSecretNotFound)
		if c := got.GetCondition(kafkav1alpha1.ConditionReady); !strings.Contains(c.Message, `"pg-app"`) {
			t.Errorf("missing -app Secret: message %q does not name it", c.Message)
		}
		te.secret(t, ns, "pg-app", map[string]string{
			"uri": pg.TLSURL("postgres", "localhost", ""), "host": "localhost", "port": "5432",
			"dbname": "postgres", "username": "app", "password": "not-used",
		})
		te.secret(t, ns, "pg-ca", map[string]string{"ca.crt": ca.PEM})
		got = te.waitReady(t, ns, "orders-db")
		want := &kafkav1alpha1.PlatformDatabaseStatus{OwnerSecret: "pg-app", CASecret: "pg-ca", DDLEndpoint: "localhost:5432"}
		if got.Status.Platform == nil || !reflect.DeepEqual(got.Status.Platform.Database, want) {
			t.Errorf("status.platform %+v, want database %+v", got.Status.Platform, want)
		}
		dep := &appsv1.Deployment{}
		if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders-db-consumer"}, dep); err != nil {
			t.Fatal(err)
		}
		var caVol bool
		for _, v := range dep.Spec.Template.Spec.Volumes {
			caVol = caVol || v.Secret != nil && v.Secret.SecretName == "pg-ca"
		}
		if !caVol {
			t.Errorf("the consumer does not mount the cluster CA pg-ca: %+v", dep.Spec.Template.Spec.Volumes)
		}
		// The Cluster was read, never written.
		cl, err := te.getPlatform(t, cnpgClusterGVK, ns, "pg")
		if err != nil || cl.GetGeneration() != 1 || len(cl.GetOwnerReferences()) != 0 {
			t.Errorf("Cluster changed: generation %d owners %v err %v", cl.GetGeneration(), cl.GetOwnerReferences(), err)
		}
	})

	t.Run("CloudNativePGPoolerAndRole", func(t *testing.T) {
		// The consumer through a transaction-mode Pooler as a managed role:
		// its URL (in the "<name>-platform" Secret) names the Pooler's
		// Service and the role, and it is told the pool mode; DDL stays on
		// the read-write Service as the owner.
		te.platformObject(t, cnpgPoolerGVK, ns, "pg-pooler-rw", map[string]any{
			"cluster": map[string]any{"name": "pg"}, "instances": int64(1), "type": "rw",
			"pgbouncer": map[string]any{"poolMode": "transaction"},
		}, nil)
		te.secret(t, ns, "orders-consumer-role", map[string]string{"username": "orders_consumer", "password": "role-pw"})
		te.create(t, newConsumer(ns, "pooled", withCNPG("pg"), withTable("pooled_event"), func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Database.CloudNativePG.Pooler = "pg-pooler-rw"
			o.Spec.Database.CloudNativePG.ConsumerRole = &kafkav1alpha1.CloudNativePGRole{
				Name: "orders_consumer", SecretRef: kafkav1alpha1.LocalObjectName{Name: "orders-consumer-role"}}
		}))
		var dep appsv1.Deployment
		eventually(t, 30*time.Second, "the consumer Deployment through the Pooler", func() (bool, string) {
			if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "pooled-consumer"}, &dep); err != nil {
				return false, err.Error() + "; " + conditionsSummary(te.get(t, ns, "pooled"))
			}
			return true, ""
		})
		env := envMap(dep.Spec.Template.Spec.Containers[0].Env)
		if env["CONSUMER_DATABASE_POOLER"] != "transaction" {
			t.Errorf("CONSUMER_DATABASE_POOLER %q, want transaction (the Pooler's poolMode)", env["CONSUMER_DATABASE_POOLER"])
		}
		var urlRef string
		for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "CONSUMER_DATABASE_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				urlRef = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
		}
		if urlRef != "pooled-platform/uri" {
			t.Errorf("CONSUMER_DATABASE_URL from %q, want pooled-platform/uri", urlRef)
		}
		var sec corev1.Secret
		if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "pooled-platform"}, &sec); err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(string(sec.Data["uri"]))
		if err != nil {
			t.Fatal(err)
		}
		if pw, _ := u.User.Password(); u.Host != "pg-pooler-rw:5432" || u.User.Username() != "orders_consumer" || pw != "role-pw" || u.Path != "/postgres" {
			t.Errorf("consumer URL host %q user %q path %q: want the Pooler's Service as orders_consumer", u.Host, u.User.Username(), u.Path)
		}
		want := &kafkav1alpha1.PlatformDatabaseStatus{OwnerSecret: "pg-app", CASecret: "pg-ca", DDLEndpoint: "localhost:5432",
			ConsumerSecret: "orders-consumer-role", ConsumerEndpoint: "pg-pooler-rw:5432", ConsumerPoolMode: "transaction"}
		eventually(t, 30*time.Second, "status.platform.database through the Pooler", func() (bool, string) {
			got := te.get(t, ns, "pooled")
			if got.Status.Platform == nil || !reflect.DeepEqual(got.Status.Platform.Database, want) {
				return false, fmt.Sprintf("%+v", got.Status.Platform)
			}
			return true, ""
		})
	})

	t.Run("Strimzi", func(t *testing.T) {
		te.waitCondition(t, ns, "k", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaClusterNotFound)
		te.platformObject(t, strimziKafkaGVK, ns, "kc", map[string]any{}, map[string]any{"listeners": []any{
			map[string]any{"name": "plain", "bootstrapServers": "kc-kafka-bootstrap." + ns + ".svc:9092"},
			map[string]any{"name": "tls", "bootstrapServers": "kc-kafka-bootstrap." + ns + ".svc:9093"},
		}})
		if err := te.update(t, ns, "k", func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Kafka.DeadLetterTopic = "orders.dead-letter"
			o.Spec.Dedup.Retention = &metav1.Duration{Duration: 48 * time.Hour}
			o.Spec.Kafka.Strimzi.DeadLetterTopic = &kafkav1alpha1.StrimziTopicSpec{Partitions: ptrTo[int32](3)}
		}); err != nil {
			t.Fatal(err)
		}
		te.waitCondition(t, ns, "k", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaUserNotReady)
		obj := te.get(t, ns, "k")

		user, err := te.getPlatform(t, strimziUserGVK, ns, "k")
		if err != nil {
			t.Fatal(err)
		}
		assertControlledBy(t, user, obj)
		if l := user.GetLabels()["strimzi.io/cluster"]; l != "kc" {
			t.Errorf("KafkaUser label strimzi.io/cluster=%q", l)
		}
		spec, _ := json.Marshal(user.Object["spec"])
		wantSpec := `{"authentication":{"type":"scram-sha-512"},"authorization":{"acls":[` +
			`{"host":"*","operations":["Read","Describe","DescribeConfigs"],"resource":{"name":"orders","patternType":"literal","type":"topic"}},` +
			`{"host":"*","operations":["Read"],"resource":{"name":"orders-writer","patternType":"literal","type":"group"}},` +
			`{"host":"*","operations":["Write","Read","Describe","DescribeConfigs"],"resource":{"name":"orders.dead-letter","patternType":"literal","type":"topic"}}` +
			`],"type":"simple"}}`
		if string(spec) != wantSpec {
			t.Errorf("KafkaUser spec\n got %s\nwant %s", spec, wantSpec)
		}
		topic, err := te.getPlatform(t, strimziTopicGVK, ns, "k-dead-letter")
		if err != nil {
			t.Fatal(err)
		}
		assertControlledBy(t, topic, obj)
		tspec, _ := json.Marshal(topic.Object["spec"])
		if want := `{"config":{"retention.ms":172800000},"partitions":3,"replicas":3,"topicName":"orders.dead-letter"}`; string(tspec) != want {
			t.Errorf("KafkaTopic spec\n got %s\nwant %s", tspec, want)
		}

		// The User Operator makes the Secret and reports Ready.
		te.secret(t, ns, "k", map[string]string{"password": "scram-password"})
		te.secret(t, ns, "kc-cluster-ca-cert", map[string]string{"ca.crt": ca.PEM})
		user.Object["status"] = map[string]any{"username": "k", "secret": "k",
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
		if err := te.c.Status().Update(ctx, user); err != nil {
			t.Fatal(err)
		}
		var dep appsv1.Deployment
		eventually(t, 30*time.Second, "the consumer Deployment with the KafkaUser's Secrets", func() (bool, string) {
			if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "k-consumer"}, &dep); err != nil {
				return false, err.Error() + "; " + conditionsSummary(te.get(t, ns, "k"))
			}
			return true, ""
		})
		refs := map[string]string{}
		for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
		}
		env := envMap(dep.Spec.Template.Spec.Containers[0].Env)
		if b := env["CONSUMER_BROKERS"]; b != "kc-kafka-bootstrap."+ns+".svc:9093" {
			t.Errorf("CONSUMER_BROKERS %q, want the tls listener's bootstrap", b)
		}
		if env["CONSUMER_SASL_MECHANISM"] != "SCRAM-SHA-512" || env["CONSUMER_TLS_ENABLED"] != "true" {
			t.Errorf("SASL mechanism %q, TLS %q", env["CONSUMER_SASL_MECHANISM"], env["CONSUMER_TLS_ENABLED"])
		}
		var passwordRef, usernameRef bool
		for _, r := range refs {
			passwordRef = passwordRef || r == "k/password"
			usernameRef = usernameRef || r == "k-platform/username"
		}
		var caVol bool
		for _, v := range dep.Spec.Template.Spec.Volumes {
			caVol = caVol || v.Secret != nil && v.Secret.SecretName == "kc-cluster-ca-cert"
		}
		if !passwordRef || !usernameRef || !caVol {
			t.Errorf("Deployment Secrets: env refs %v, CA volume %v", refs, caVol)
		}
		var platformSecret corev1.Secret
		if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "k-platform"}, &platformSecret); err != nil {
			t.Fatal(err)
		}
		assertControlledBy(t, &platformSecret, obj)
		// The reconcile that makes the Deployment writes status after it:
		// wait for the status rather than read it once.
		eventually(t, 30*time.Second, "status.platform.kafka", func() (bool, string) {
			got := te.get(t, ns, "k")
			p := got.Status.Platform
			if p == nil || p.Kafka == nil || p.Kafka.KafkaUser != "k" || p.Kafka.DeadLetterTopic != "k-dead-letter" ||
				p.Kafka.CASecret != "kc-cluster-ca-cert" || p.Kafka.BootstrapServers != "kc-kafka-bootstrap."+ns+".svc:9093" {
				return false, fmt.Sprintf("%+v", p)
			}
			return true, ""
		})
	})

	t.Run("StrimziMutualTLS", func(t *testing.T) {
		// authentication: tls: a KafkaUser of type tls, and the consumer
		// gets the User Operator's user.crt/user.key and the cluster CA as
		// files, with no SASL.
		te.create(t, newConsumer(ns, "m", withStrimzi("kc"), withTable("m_event"), func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Kafka.Strimzi.Authentication = kafkav1alpha1.StrimziTLS
		}))
		var user *unstructured.Unstructured
		eventually(t, 30*time.Second, "the KafkaUser of type tls", func() (bool, string) {
			u, err := te.getPlatform(t, strimziUserGVK, ns, "m")
			if err != nil {
				return false, err.Error()
			}
			user = u
			typ, _, _ := unstructured.NestedString(u.Object, "spec", "authentication", "type")
			return typ == "tls", "authentication type " + typ
		})
		crt, key, err := ca.IssueServer("m") // any pair the CA signed does for the operator's key-pair check
		if err != nil {
			t.Fatal(err)
		}
		te.secret(t, ns, "m", map[string]string{"user.crt": string(crt), "user.key": string(key), "ca.crt": ca.PEM})
		user.Object["status"] = map[string]any{"username": "CN=m", "secret": "m",
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
		if err := te.c.Status().Update(ctx, user); err != nil {
			t.Fatal(err)
		}
		var dep appsv1.Deployment
		eventually(t, 30*time.Second, "the consumer Deployment with the KafkaUser's certificate", func() (bool, string) {
			if err := te.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "m-consumer"}, &dep); err != nil {
				return false, err.Error() + "; " + conditionsSummary(te.get(t, ns, "m"))
			}
			return true, ""
		})
		env := envMap(dep.Spec.Template.Spec.Containers[0].Env)
		if env["CONSUMER_TLS_ENABLED"] != "true" || env["CONSUMER_SASL_MECHANISM"] != "" {
			t.Errorf("TLS %q, SASL mechanism %q: want TLS and no SASL", env["CONSUMER_TLS_ENABLED"], env["CONSUMER_SASL_MECHANISM"])
		}
		files := map[string]string{}
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Secret != nil && len(v.Secret.Items) == 1 {
				files[v.Name] = v.Secret.SecretName + "/" + v.Secret.Items[0].Key
			}
		}
		want := map[string]string{"kafka-tls-ca": "kc-cluster-ca-cert/ca.crt", "kafka-tls-cert": "m/user.crt", "kafka-tls-key": "m/user.key"}
		for vol, src := range want {
			if files[vol] != src {
				t.Errorf("volume %s from %q, want %q (volumes %v)", vol, files[vol], src, files)
			}
		}
	})

	t.Run("Samples", func(t *testing.T) { testPlatformSamples(t, te) })

	t.Run("UserOwnedKafkaUserIsNotOverwritten", func(t *testing.T) {
		te.platformObject(t, strimziUserGVK, ns, "mine", map[string]any{"authentication": map[string]any{"type": "tls"}}, nil)
		// A table of its own: k's would be TableClaimedByAnotherObject,
		// which takes Ready (the database phases go on during a Strimzi
		// wait); KafkaReady says PlatformObjectNotOwned all the same.
		te.create(t, newConsumer(ns, "mine", withStrimzi("kc"), withTable("mine_event")))
		te.waitCondition(t, ns, "mine", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformObjectNotOwned)
		te.waitCondition(t, ns, "mine", kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonPlatformObjectNotOwned)
		u, err := te.getPlatform(t, strimziUserGVK, ns, "mine")
		if err != nil || u.GetGeneration() != 1 || len(u.GetOwnerReferences()) != 0 {
			t.Errorf("user's KafkaUser changed: generation %d owners %v err %v", u.GetGeneration(), u.GetOwnerReferences(), err)
		}
		u.SetAnnotations(map[string]string{kafkav1alpha1.AnnotationAdoptPlatformObject: "mine"})
		if err := te.c.Update(ctx, u); err != nil {
			t.Fatal(err)
		}
		te.waitCondition(t, ns, "mine", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonKafkaUserNotReady)
		u, _ = te.getPlatform(t, strimziUserGVK, ns, "mine")
		assertControlledBy(t, u, te.get(t, ns, "mine"))
	})
}

func ptrTo[T any](v T) *T { return &v }

// TestPlatformSecretIndex: the Secrets the platform integrations read are in
// the Secret watch's index, so their creation or rotation reconciles the
// object without waiting for a poll.
func TestPlatformSecretIndex(t *testing.T) {
	obj := newConsumer("ns", "orders", withCNPG("pg"), withStrimzi("kc"), func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Database.CloudNativePG.ConsumerRole = &kafkav1alpha1.CloudNativePGRole{Name: "orders_consumer",
			SecretRef: kafkav1alpha1.LocalObjectName{Name: "orders-consumer-role"}}
	})
	got := indexSecretRefs(obj)
	want := []string{"pg-app", "pg-ca", "orders-consumer-role", "orders", "kc-cluster-ca-cert", "orders-platform"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("indexSecretRefs = %v, want %v", got, want)
	}
}

// testPlatformSamples creates every object of config/samples/platforms
// (docs/platforms.md shows the same YAML) through the API server with the
// stand-in CRDs, and the Strimzi sample gets its KafkaUser; the Outbox
// sample waits for the Cluster's Secrets.
func testPlatformSamples(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "platforms.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"cloudnativepg.yaml", "strimzi.yaml", "outbox.yaml"} {
		sample, err := os.ReadFile(filepath.Join("..", "config", "samples", "platforms", file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "```yaml\n"+string(sample)+"```") {
			t.Errorf("docs/platforms.md does not show config/samples/platforms/%s exactly", file)
		}
		f, err := os.Open(filepath.Join("..", "config", "samples", "platforms", file))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
		n := 0
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			u.SetNamespace(ns)
			if err := te.c.Create(context.Background(), u); err != nil {
				t.Errorf("%s: creating %s %s: %v", file, u.GetKind(), u.GetName(), err)
			}
			n++
		}
		_ = f.Close()
		if n == 0 {
			t.Errorf("%s: no objects", file)
		}
	}
	// Strimzi's Cluster Operator reports the listeners.
	kafka, err := te.getPlatform(t, strimziKafkaGVK, ns, "events")
	if err != nil {
		t.Fatal(err)
	}
	kafka.Object["status"] = map[string]any{"listeners": []any{
		map[string]any{"name": "tls", "bootstrapServers": "events-kafka-bootstrap." + ns + ".svc:9093"}}}
	if err := te.c.Status().Update(context.Background(), kafka); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Strimzi sample's KafkaUser", func() (bool, string) {
		_, err := te.getPlatform(t, strimziUserGVK, ns, "payments")
		return err == nil, conditionsSummary(te.get(t, ns, "payments"))
	})
	te.waitCondition(t, ns, "orders", kafkav1alpha1.ConditionReady, metav1.ConditionFalse, kafkav1alpha1.ReasonCNPGSecretNotFound)
	// The Outbox of the same name wants nothing of the IdempotentConsumer's.
	te.waitOutbox(t, ns, "orders", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonCNPGSecretNotFound, `"orders-pg-app"`)
}
