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
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/controllers/objects"
)

func builtObject() *kafkav1alpha1.IdempotentConsumer {
	return newConsumer("ns", "orders", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.UID = types.UID("0b7c5c9e-0000-4000-8000-000000000001")
	})
}

func TestBuildDeploymentIsPure(t *testing.T) {
	a := objects.Deployment(builtObject(), objects.Options{ConfigHash: "h"})
	b := objects.Deployment(builtObject(), objects.Options{ConfigHash: "h"})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two builds of the same input differ")
	}
	c := objects.Deployment(builtObject(), objects.Options{ConfigHash: "other"})
	if a.Annotations[objects.AnnotationSpecHash] == c.Annotations[objects.AnnotationSpecHash] {
		t.Error("a new config hash did not change the spec hash")
	}
	if a.Spec.Template.Spec.Containers[0].Image != objects.DefaultConsumerImage {
		t.Errorf("image %q, want the default", a.Spec.Template.Spec.Containers[0].Image)
	}
	if d := objects.Deployment(builtObject(), objects.Options{DefaultImage: "registry.example/consumer:v1"}); d.Spec.Template.Spec.Containers[0].Image != "registry.example/consumer:v1" {
		t.Errorf("operator default image not used: %q", d.Spec.Template.Spec.Containers[0].Image)
	}
}

func TestBuildDeploymentRestrictedAndOwned(t *testing.T) {
	obj := builtObject()
	dep := objects.Deployment(obj, objects.Options{})
	assertRestricted(t, dep.Spec.Template.Spec)
	if !metav1.IsControlledBy(dep, obj) {
		t.Errorf("owner references %+v", dep.OwnerReferences)
	}
	if ptrTrue(dep.Spec.Template.Spec.AutomountServiceAccountToken) {
		t.Error("the consumer gets an API token it never uses")
	}
	for k, v := range objects.SelectorLabels(obj) {
		if dep.Spec.Template.Labels[k] != v || dep.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("selector label %s=%s missing", k, v)
		}
	}
	if dep.Labels[objects.LabelManagedBy] != objects.ManagedByValue {
		t.Error("the Deployment lacks the managed-by label the manager's cache selects on")
	}
}

func TestBuildDeploymentEnv(t *testing.T) {
	obj := builtObject()
	obj.Spec.Kafka.TLS = &kafkav1alpha1.KafkaTLS{
		CASecretRef:         &kafkav1alpha1.SecretKeyRef{Name: "ca", Key: "ca.crt"},
		ClientCertSecretRef: &kafkav1alpha1.SecretKeyRef{Name: "client", Key: "tls.crt"},
		ClientKeySecretRef:  &kafkav1alpha1.SecretKeyRef{Name: "client", Key: "tls.key"},
	}
	obj.Spec.Database.CASecretRef = &kafkav1alpha1.SecretKeyRef{Name: "pg-ca", Key: "ca.crt"}
	obj.Spec.Consumer.Sink = kafkav1alpha1.SinkSpec{Type: kafkav1alpha1.SinkSQL, SQL: &kafkav1alpha1.SQLSinkSpec{Statement: "INSERT INTO t VALUES ($1)"}}
	obj.Spec.Consumer.Env = []corev1.EnvVar{
		{Name: envvars.Topic, Value: "hijacked"},                   // ours: dropped
		{Name: envvars.DatabaseURLFallback, Value: "postgres://x"}, // would shadow the Secret: dropped
		{Name: envvars.Envelope, Value: "cloudevents"},             // not set by us: kept
	}
	dep := objects.Deployment(obj, objects.Options{})
	c := dep.Spec.Template.Spec.Containers[0]
	env := envMap(c.Env)
	if env[envvars.Topic] != "orders" || env[envvars.Envelope] != "cloudevents" {
		t.Errorf("topic %q envelope %q: user env must add, never override", env[envvars.Topic], env[envvars.Envelope])
	}
	if _, ok := env[envvars.DatabaseURLFallback]; ok {
		t.Error("user env set DATABASE_URL")
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			t.Errorf("env %s set twice", e.Name)
		}
		seen[e.Name] = true
		if !slices.Contains(envvars.All, e.Name) && e.Name != envvars.Envelope && e.Name != objects.EnvPGSSLRootCert && e.Name != objects.EnvPGSSLMode {
			t.Errorf("env %s is not a variable cmd/consumer reads", e.Name)
		}
	}
	for _, name := range []string{envvars.Brokers, envvars.Topic, envvars.Group, envvars.DatabaseURL, envvars.Sink} {
		if !seen[name] {
			t.Errorf("required env %s missing", name)
		}
	}
	if env[envvars.Sink] != "sql" || env[envvars.SinkSQLStatement] != "INSERT INTO t VALUES ($1)" {
		t.Errorf("sql sink env %q %q", env[envvars.Sink], env[envvars.SinkSQLStatement])
	}
	// TLS files come from Secret volumes, mounted where the env says.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	vols := map[string]*corev1.SecretVolumeSource{}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		vols[v.Name] = v.Secret
	}
	for envName, ref := range map[string]*kafkav1alpha1.SecretKeyRef{
		envvars.TLSCAFile: obj.Spec.Kafka.TLS.CASecretRef, envvars.TLSCertFile: obj.Spec.Kafka.TLS.ClientCertSecretRef, envvars.TLSKeyFile: obj.Spec.Kafka.TLS.ClientKeySecretRef,
	} {
		file := env[envName]
		var found bool
		for name, dir := range mounts {
			if v := vols[name]; v != nil && filepath.Dir(file) == dir && v.SecretName == ref.Name &&
				len(v.Items) == 1 && v.Items[0].Key == ref.Key && v.Items[0].Path == filepath.Base(file) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s=%q is not backed by Secret %s key %s", envName, file, ref.Name, ref.Key)
		}
	}
	// Every Secret the env or volumes use is one the object references, so
	// the config hash and the Secret watch cover it.
	refs := map[string]bool{}
	for _, r := range secretRefs(obj) {
		refs[r.Name+"/"+r.Key] = true
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !refs[e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key] {
			t.Errorf("env %s uses an untracked Secret key", e.Name)
		}
	}
}

// TestBuildDeploymentOrderingAndMemoryLimit: ordering and maxInFlight reach
// the consumer only when set, and the container's memory limit always does,
// through the downward API, so the consumer can size itself to it.
func TestBuildDeploymentOrderingAndMemoryLimit(t *testing.T) {
	obj := builtObject()
	c := objects.Deployment(obj, objects.Options{}).Spec.Template.Spec.Containers[0]
	env := envMap(c.Env)
	for _, name := range []string{envvars.Ordering, envvars.MaxInFlight} {
		if _, ok := env[name]; ok {
			t.Errorf("%s set although the spec leaves it empty (the consumer's default applies)", name)
		}
	}
	var mem *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == envvars.MemoryLimit {
			mem = &c.Env[i]
		}
	}
	want := corev1.ResourceFieldSelector{ContainerName: c.Name, Resource: "limits.memory"}
	if mem == nil || mem.Value != "" || mem.ValueFrom == nil || mem.ValueFrom.ResourceFieldRef == nil || *mem.ValueFrom.ResourceFieldRef != want {
		t.Fatalf("%s = %+v, want valueFrom.resourceFieldRef %+v", envvars.MemoryLimit, mem, want)
	}

	obj.Spec.Consumer.Ordering = kafkav1alpha1.OrderingKey
	obj.Spec.Consumer.MaxInFlight = ptr.To(int32(128))
	obj.Spec.Consumer.Env = []corev1.EnvVar{{Name: envvars.MemoryLimit, Value: "1"}} // ours: dropped
	c = objects.Deployment(obj, objects.Options{}).Spec.Template.Spec.Containers[0]
	env = envMap(c.Env)
	if env[envvars.Ordering] != "Key" || env[envvars.MaxInFlight] != "128" {
		t.Errorf("ordering %q maxInFlight %q, want Key and 128", env[envvars.Ordering], env[envvars.MaxInFlight])
	}
	n := 0
	for _, e := range c.Env {
		if e.Name == envvars.MemoryLimit {
			n++
			if e.ValueFrom == nil {
				t.Errorf("user env overrode %s", envvars.MemoryLimit)
			}
		}
	}
	if n != 1 {
		t.Errorf("%s set %d times", envvars.MemoryLimit, n)
	}
}

func TestConsumerEnvNamesAreTheConsumersOwn(t *testing.T) {
	// The builder names variables only through consumer/envvars; a literal
	// CONSUMER_ name in this package or the builders' would bypass the
	// shared contract.
	files, _ := filepath.Glob("*.go")
	builders, _ := filepath.Glob(filepath.Join("objects", "*.go"))
	if !slices.Contains(builders, filepath.Join("objects", "deployment.go")) {
		t.Fatalf("the Deployment builder is not where this test looks: %q", builders)
	}
	files = append(files, builders...)
	re := regexp.MustCompile(`"CONSUMER_[A-Z_]+"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := re.Find(b); m != nil {
			t.Errorf("%s spells out %s instead of using consumer/envvars", f, m)
		}
	}
}

func TestNextMaintenance(t *testing.T) {
	day := func(d, h, m int) time.Time { return time.Date(2026, 12, d, h, m, 0, 0, time.UTC) }
	daily := func(from, to time.Time) dedup.Partition { return dedup.Partition{From: from, To: to} }
	for _, tc := range []struct {
		name      string
		now       time.Time
		iv        dedup.Interval
		retention time.Duration
		ours      []dedup.Partition
		want      time.Time
	}{
		{"daily, boundary minus lead", day(2, 12, 0), dedup.Daily, 48 * time.Hour, nil, day(2, 23, 55)},
		{"daily, inside the lead", day(2, 23, 57), dedup.Daily, 48 * time.Hour, nil, day(3, 23, 55)},
		{"hourly", day(2, 12, 30), dedup.Hourly, 24 * time.Hour, nil, day(2, 12, 55)},
		{"expiry before the boundary", day(3, 6, 0), dedup.Daily, 36 * time.Hour,
			[]dedup.Partition{daily(day(1, 0, 0), day(2, 0, 0)), daily(day(2, 0, 0), day(3, 0, 0))}, day(3, 12, 0)},
		{"expiry already past is ignored", day(5, 12, 0), dedup.Daily, 24 * time.Hour,
			[]dedup.Partition{daily(day(1, 0, 0), day(2, 0, 0))}, day(5, 23, 55)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := nextMaintenance(tc.now, tc.iv, 5*time.Minute, tc.retention, tc.ours)
			if !got.Equal(tc.want) {
				t.Errorf("nextMaintenance(%s) = %s, want %s", tc.now, got, tc.want)
			}
		})
	}
}

func TestClassifyDatabaseError(t *testing.T) {
	for _, tc := range []struct {
		err       error
		reason    string
		transient bool
	}{
		{&InvalidURLError{}, kafkav1alpha1.ReasonInvalidURL, false},
		{fmt.Errorf("ensuring: %w", &pgconn.PgError{Code: "28P01"}), kafkav1alpha1.ReasonAuthenticationFailed, false},
		{fmt.Errorf("ensuring: %w", &dedup.TransactionPoolerError{Table: "public.t"}), kafkav1alpha1.ReasonTransactionPooler, true},
		{&pgconn.PgError{Code: "3D000"}, kafkav1alpha1.ReasonDatabaseNotFound, false},
		{&pgconn.PgError{Code: "42501"}, kafkav1alpha1.ReasonPermissionDenied, false},
		{&pgconn.PgError{Code: "57P03"}, kafkav1alpha1.ReasonDatabaseUnreachable, true},
		{&pgconn.PgError{Code: "42P07"}, kafkav1alpha1.ReasonDatabaseError, true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), kafkav1alpha1.ReasonDatabaseUnreachable, true},
		{context.DeadlineExceeded, kafkav1alpha1.ReasonDatabaseUnreachable, true},
		{&dedup.LayoutError{Table: "public.t"}, kafkav1alpha1.ReasonTableLayoutMismatch, false},
		{&dedup.LockError{Op: "attach", Attempts: 5, Err: errors.New("timeout")}, kafkav1alpha1.ReasonLockNotAvailable, true},
		{fmt.Errorf("x: %w", dedup.ErrInvalidIdentifier), kafkav1alpha1.ReasonInvalidSpec, false},
		{errors.New("something else"), kafkav1alpha1.ReasonDatabaseError, true},
		// TLS: a server that is not TLS, or refuses it, is not a rejected certificate.
		{fmt.Errorf("tls error: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), kafkav1alpha1.ReasonDatabaseTLSFailed, true},
		{errors.New("failed to connect to `host=db user=app database=x`: server refused TLS connection"), kafkav1alpha1.ReasonDatabaseTLSFailed, true},
		{&tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}, kafkav1alpha1.ReasonCertificateRejected, true},
	} {
		reason, transient := classifyDatabaseError(tc.err)
		if reason != tc.reason || transient != tc.transient {
			t.Errorf("classify(%v) = %s, %v; want %s, %v", tc.err, reason, transient, tc.reason, tc.transient)
		}
	}
}

func TestScrub(t *testing.T) {
	s := &reconcileState{}
	s.addSecret("postgres://app:s3cr%2Ft!pw@db:5432/x", true)
	for _, msg := range []string{
		"failed: postgres://app:s3cr%2Ft!pw@db:5432/x",
		"password s3cr/t!pw rejected",
		"escaped s3cr%2Ft%21pw",
	} {
		if got := s.scrub(msg); strings.Contains(got, "s3cr") {
			t.Errorf("scrub(%q) = %q still holds the password", msg, got)
		}
	}
}

func TestBackoff(t *testing.T) {
	b := newBackoff(time.Second, 5*time.Second)
	k := types.NamespacedName{Namespace: "a", Name: "b"}
	var got []time.Duration
	for range 5 {
		got = append(got, b.next(k))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("backoff %v, want %v", got, want)
	}
	b.reset(k)
	if d := b.next(k); d != time.Second {
		t.Errorf("after reset %s, want 1s", d)
	}
}

// crdSchema loads the generated CRD's spec schema.
func crdSchema(t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "kafka.idempotency.dev_idempotentconsumers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
}

// TestCRDMatchesDedupLimits keeps the CRD's identifier rules in step with
// consumer/dedup, which validates again at run time: the table name limit,
// and the reserved words (checked against the server's own list).
func TestCRDMatchesDedupLimits(t *testing.T) {
	db := crdSchema(t).Properties["database"]
	table := db.Properties["table"]
	if table.MaxLength == nil || *table.MaxLength != int64(dedup.MaxTableNameLen) {
		t.Errorf("CRD table maxLength %v, dedup.MaxTableNameLen %d", table.MaxLength, dedup.MaxTableNameLen)
	}
	var words []string
	re := regexp.MustCompile(`'([a-z_]+)'`)
	for _, rule := range table.XValidations {
		if strings.Contains(rule.Message, "reserved word") {
			for _, m := range re.FindAllStringSubmatch(rule.Rule, -1) {
				words = append(words, m[1])
			}
		}
	}
	if len(words) == 0 {
		t.Fatal("no reserved-word rule on spec.database.table")
	}
	for _, w := range words {
		if dedup.ValidateIdentifier(w) == nil {
			t.Errorf("the CRD refuses %q but dedup accepts it", w)
		}
	}
	if testing.Short() {
		return
	}
	conn := pgConn(t, consumertest.DatabaseURL(t))
	rows, err := conn.Query(context.Background(), `SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T') ORDER BY word`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var server []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		server = append(server, w)
	}
	// Every word this server reserves must be refused; the CRD may refuse
	// more (system_user is reserved from PostgreSQL 16 on).
	sort.Strings(words)
	for _, w := range server {
		if _, found := slices.BinarySearch(words, w); !found {
			t.Errorf("PostgreSQL reserves %q but the CRD accepts it", w)
		}
	}
}
