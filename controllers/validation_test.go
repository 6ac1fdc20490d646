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
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// validObject is the smallest valid IdempotentConsumer, as the API server
// sees it; each case below breaks one thing.
func validObject(ns, name string) map[string]any {
	return map[string]any{
		"apiVersion": "kafka.idempotency.dev/v1alpha1",
		"kind":       "IdempotentConsumer",
		"metadata":   map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{
			"kafka": map[string]any{
				"bootstrapServers": []any{"kafka:9092"},
				"topic":            "orders",
				"groupID":          "orders-writer",
			},
			"database": map[string]any{
				"urlSecretRef": map[string]any{"name": "db", "key": "url"},
			},
			"consumer": map[string]any{
				"sink": map[string]any{"type": "Log"},
			},
		},
	}
}

func set(path string, v any) func(map[string]any) {
	return func(obj map[string]any) {
		parts := strings.Split(path, ".")
		m := obj
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
}

func del(path string) func(map[string]any) {
	return func(obj map[string]any) {
		parts := strings.Split(path, ".")
		m := obj
		for _, p := range parts[:len(parts)-1] {
			m = m[p].(map[string]any)
		}
		delete(m, parts[len(parts)-1])
	}
}

func testInvalidObjectsRejected(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	cases := []struct {
		name string
		mods []func(map[string]any)
		want string // a substring of the API server's message
	}{
		// SQL identifiers: injection attempts, quoting tricks, system names.
		{"table with statement injection", []func(map[string]any){set("spec.database.table", "processed_event; DROP TABLE users")}, "spec.database.table"},
		{"table with quote injection", []func(map[string]any){set("spec.database.table", `pe"); DROP TABLE users; --`)}, "should match '^[a-z_][a-z0-9_]*$'"},
		{"schema with quote", []func(map[string]any){set("spec.database.schema", "public'")}, "spec.database.schema"},
		{"schema with comment", []func(map[string]any){set("spec.database.schema", "a--b")}, "spec.database.schema"},
		{"table upper case", []func(map[string]any){set("spec.database.table", "ProcessedEvent")}, "spec.database.table"},
		{"table unicode", []func(map[string]any){set("spec.database.table", "événement")}, "spec.database.table"},
		{"table leading digit", []func(map[string]any){set("spec.database.table", "1table")}, "spec.database.table"},
		{"table too long for partition suffix", []func(map[string]any){set("spec.database.table", strings.Repeat("a", 52))}, "Too long: may not be more than 51"},
		{"schema too long", []func(map[string]any){set("spec.database.schema", strings.Repeat("s", 64))}, "Too long: may not be more than 63"},
		{"table reserved word", []func(map[string]any){set("spec.database.table", "select")}, "table must not be a PostgreSQL reserved word"},
		{"schema reserved word", []func(map[string]any){set("spec.database.schema", "user")}, "schema must not be a PostgreSQL reserved word"},
		{"system schema", []func(map[string]any){set("spec.database.schema", "pg_catalog")}, "schema must not be a system schema"},
		{"information_schema", []func(map[string]any){set("spec.database.schema", "information_schema")}, "schema must not be a system schema"},
		{"empty table", []func(map[string]any){set("spec.database.table", "")}, "spec.database.table"},
		// Retention and partitioning.
		{"retention zero", []func(map[string]any){set("spec.dedup.retention", "0s")}, "retention must be at least one partition interval"},
		{"retention below interval", []func(map[string]any){set("spec.dedup.retention", "23h"), set("spec.dedup.interval", "Daily")}, "retention must be at least one partition interval"},
		{"retention in days", []func(map[string]any){set("spec.dedup.retention", "7d")}, "spec.dedup.retention"},
		{"retention negative", []func(map[string]any){set("spec.dedup.retention", "-1h")}, "spec.dedup.retention"},
		{"retention garbage", []func(map[string]any){set("spec.dedup.retention", "1h; DROP TABLE x")}, "spec.dedup.retention"},
		{"retention too many hourly partitions", []func(map[string]any){set("spec.dedup.interval", "Hourly"), set("spec.dedup.retention", "2000h")}, "with Hourly partitions retention must be at most 1920h"},
		{"retention above ten years", []func(map[string]any){set("spec.dedup.interval", "Monthly"), set("spec.dedup.retention", "90000h")}, "retention must be at most 87840h"},
		{"unknown interval", []func(map[string]any){set("spec.dedup.interval", "Fortnightly")}, `Unsupported value: "Fortnightly"`},
		{"unknown scope", []func(map[string]any){set("spec.dedup.scope", "Topic")}, `Unsupported value: "Topic"`},
		{"premake zero", []func(map[string]any){set("spec.dedup.premake", int64(0))}, "spec.dedup.premake"},
		{"premake too many", []func(map[string]any){set("spec.dedup.premake", int64(1000))}, "spec.dedup.premake"},
		{"unknown out-of-window policy", []func(map[string]any){set("spec.dedup.outOfWindowPolicy", "Ignore")}, `Unsupported value: "Ignore"`},
		// Required fields.
		{"missing spec", []func(map[string]any){del("spec")}, "spec: Required value"},
		{"missing kafka", []func(map[string]any){del("spec.kafka")}, "spec.kafka: Required value"},
		{"missing topic", []func(map[string]any){del("spec.kafka.topic")}, "spec.kafka.topic: Required value"},
		{"missing group", []func(map[string]any){del("spec.kafka.groupID")}, "spec.kafka.groupID: Required value"},
		{"missing database", []func(map[string]any){del("spec.database")}, "spec.database: Required value"},
		{"missing url secret", []func(map[string]any){del("spec.database.urlSecretRef")}, "set exactly one of database.urlSecretRef and database.cloudNativePG"},
		{"missing secret key", []func(map[string]any){del("spec.database.urlSecretRef.key")}, "spec.database.urlSecretRef.key: Required value"},
		{"missing sink", []func(map[string]any){del("spec.consumer.sink")}, "spec.consumer.sink: Required value"},
		// Kafka.
		{"no brokers", []func(map[string]any){set("spec.kafka.bootstrapServers", []any{})}, "spec.kafka.bootstrapServers"},
		{"broker without port", []func(map[string]any){set("spec.kafka.bootstrapServers", []any{"kafka"})}, "spec.kafka.bootstrapServers[0]"},
		{"broker with scheme", []func(map[string]any){set("spec.kafka.bootstrapServers", []any{"http://kafka:9092"})}, "spec.kafka.bootstrapServers[0]"},
		{"topic with space", []func(map[string]any){set("spec.kafka.topic", "my topic")}, "spec.kafka.topic"},
		{"topic dot dot", []func(map[string]any){set("spec.kafka.topic", "..")}, "topic must not be '.' or '..'"},
		{"topic too long", []func(map[string]any){set("spec.kafka.topic", strings.Repeat("t", 250))}, "spec.kafka.topic"},
		{"dead letter is the topic", []func(map[string]any){set("spec.kafka.deadLetterTopic", "orders")}, "deadLetterTopic must differ from topic"},
		{"group with newline", []func(map[string]any){set("spec.kafka.groupID", "g\nCONSUMER_TOPIC=x")}, "spec.kafka.groupID"},
		{"unknown SASL mechanism", []func(map[string]any){set("spec.kafka.sasl", map[string]any{
			"mechanism":         "GSSAPI",
			"usernameSecretRef": map[string]any{"name": "k", "key": "u"},
			"passwordSecretRef": map[string]any{"name": "k", "key": "p"},
		})}, `Unsupported value: "GSSAPI"`},
		{"client cert without key", []func(map[string]any){set("spec.kafka.tls", map[string]any{
			"clientCertSecretRef": map[string]any{"name": "k", "key": "tls.crt"},
		})}, "clientCertSecretRef and clientKeySecretRef must be set together"},
		// Secret references.
		{"secret name path traversal", []func(map[string]any){set("spec.database.urlSecretRef.name", "../kube-system/token")}, "spec.database.urlSecretRef.name"},
		{"secret name upper case", []func(map[string]any){set("spec.database.urlSecretRef.name", "DB")}, "spec.database.urlSecretRef.name"},
		{"secret key with slash", []func(map[string]any){set("spec.database.urlSecretRef.key", "a/b")}, "spec.database.urlSecretRef.key"},
		// Consumer.
		{"sink HTTP without http", []func(map[string]any){set("spec.consumer.sink", map[string]any{"type": "HTTP"})}, "http must be set if and only if type is HTTP"},
		{"sink SQL with http", []func(map[string]any){set("spec.consumer.sink", map[string]any{"type": "SQL", "sql": map[string]any{"statement": "SELECT 1"}, "http": map[string]any{"url": "https://x"}})}, "http must be set if and only if type is HTTP"},
		{"sink URL not http", []func(map[string]any){set("spec.consumer.sink", map[string]any{"type": "HTTP", "http": map[string]any{"url": "file:///etc/passwd"}})}, "spec.consumer.sink.http.url"},
		{"unknown sink", []func(map[string]any){set("spec.consumer.sink", map[string]any{"type": "Kafka"})}, `Unsupported value: "Kafka"`},
		{"sink None with the default image", []func(map[string]any){set("spec.consumer.sink", map[string]any{"type": "None"})}, "sink type None needs a custom image"},
		{"negative replicas", []func(map[string]any){set("spec.consumer.replicas", int64(-1))}, "spec.consumer.replicas"},
		{"batch wait too long", []func(map[string]any){set("spec.consumer.batch", map[string]any{"maxWait": "5m"})}, "maxWait must be at most 1m"},
		{"key ordering with the SQL sink", []func(map[string]any){set("spec.consumer.sink", map[string]any{"type": "SQL", "sql": map[string]any{"statement": "SELECT 1"}}), set("spec.consumer.ordering", "Key")}, "ordering Key and Unordered are for the HTTP sink"},
		{"unordered with the SQL sink", []func(map[string]any){set("spec.consumer.sink", map[string]any{"type": "SQL", "sql": map[string]any{"statement": "SELECT 1"}}), set("spec.consumer.ordering", "Unordered")}, "the SQL sink runs in the dedup transaction and keeps Partition ordering"},
		{"key ordering with the Log sink", []func(map[string]any){set("spec.consumer.ordering", "Key")}, "ordering Key and Unordered are for the HTTP sink"},
		{"unknown ordering", []func(map[string]any){set("spec.consumer.ordering", "Offset")}, `Unsupported value: "Offset"`},
		{"max in flight zero", []func(map[string]any){set("spec.consumer.maxInFlight", int64(0))}, "spec.consumer.maxInFlight"},
		{"max in flight too high", []func(map[string]any){set("spec.consumer.maxInFlight", int64(4097))}, "spec.consumer.maxInFlight"},
		// Autoscaling.
		{"autoscaling max below min", []func(map[string]any){set("spec.autoscaling", map[string]any{"enabled": true, "minReplicas": int64(4), "maxReplicas": int64(2)})}, "maxReplicas must be at least minReplicas"},
		{"autoscaling without max", []func(map[string]any){set("spec.autoscaling", map[string]any{"enabled": true})}, "spec.autoscaling.maxReplicas: Required value"},
		{"autoscaling without enabled", []func(map[string]any){set("spec.autoscaling", map[string]any{"maxReplicas": int64(2)})}, "spec.autoscaling.enabled: Required value"},
		{"autoscaling zero lag threshold", []func(map[string]any){set("spec.autoscaling", map[string]any{"enabled": true, "maxReplicas": int64(2), "lagThreshold": int64(0)})}, "spec.autoscaling.lagThreshold"},
		{"autoscaling negative min", []func(map[string]any){set("spec.autoscaling", map[string]any{"enabled": true, "maxReplicas": int64(2), "minReplicas": int64(-1)})}, "spec.autoscaling.minReplicas"},
		{"autoscaling max too high", []func(map[string]any){set("spec.autoscaling", map[string]any{"enabled": true, "maxReplicas": int64(5000)})}, "spec.autoscaling.maxReplicas"},
		{"unknown deletion policy", []func(map[string]any){set("spec.deletionPolicy", "Orphan")}, `Unsupported value: "Orphan"`},
		{"name too long", []func(map[string]any){set("metadata.name", strings.Repeat("n", 64))}, "metadata.name must be at most 63 characters"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := validObject(ns, fmt.Sprintf("bad-%d", i))
			for _, m := range tc.mods {
				m(obj)
			}
			u := &unstructured.Unstructured{Object: obj}
			u.SetGroupVersionKind(schema.GroupVersionKind{Group: "kafka.idempotency.dev", Version: "v1alpha1", Kind: "IdempotentConsumer"})
			err := te.c.Create(context.Background(), u)
			if err == nil {
				t.Fatalf("the API server accepted it")
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("got %v, want an Invalid error", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("message %q does not contain %q", err.Error(), tc.want)
			}
		})
	}

	// The samples are accepted as they are.
	for _, f := range []string{"kafka_v1alpha1_idempotentconsumer_billing.yaml", "kafka_v1alpha1_idempotentconsumer_ledger.yaml",
		"kafka_v1alpha1_idempotentconsumer_orders_tableonly.yaml", "kafka_v1alpha1_idempotentconsumer_notifications_email.yaml",
		"kafka_v1alpha1_idempotentconsumer_notifications_sms.yaml"} {
		sample := loadSample(t, f)
		sample.Namespace = ns
		if err := te.c.Create(context.Background(), sample); err != nil {
			t.Errorf("sample %s refused: %v", f, err)
		}
	}

	// Partition ordering suits every sink; Key and Unordered the HTTP sink.
	for i, mods := range [][]func(map[string]any){
		{set("spec.consumer.sink", map[string]any{"type": "SQL", "sql": map[string]any{"statement": "SELECT 1"}}), set("spec.consumer.ordering", "Partition")},
		{set("spec.consumer.sink", map[string]any{"type": "HTTP", "http": map[string]any{"url": "https://x"}}), set("spec.consumer.ordering", "Unordered"), set("spec.consumer.maxInFlight", int64(4096))},
	} {
		obj := validObject(ns, fmt.Sprintf("ordering-%d", i))
		for _, m := range mods {
			m(obj)
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "kafka.idempotency.dev", Version: "v1alpha1", Kind: "IdempotentConsumer"})
		if err := te.c.Create(context.Background(), u); err != nil {
			t.Errorf("ordering case %d refused: %v", i, err)
		}
	}

	// The valid base object itself is accepted, and defaults are filled in.
	u := &unstructured.Unstructured{Object: validObject(ns, "good")}
	if err := te.c.Create(context.Background(), u); err != nil {
		t.Fatalf("the valid object was refused: %v", err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(u.GroupVersionKind())
	if err := te.c.Get(context.Background(), client.ObjectKeyFromObject(u), got); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{
		"spec.database.schema":            "public",
		"spec.database.table":             "processed_event",
		"spec.dedup.scope":                "ConsumerGroup",
		"spec.dedup.interval":             "Daily",
		"spec.dedup.retention":            "168h",
		"spec.dedup.premake":              int64(4),
		"spec.dedup.outOfWindowPolicy":    "DeadLetter",
		"spec.deletionPolicy":             "Retain",
		"spec.consumer.replicas":          int64(1),
		"spec.consumer.batch.maxWait":     "200ms",
		"spec.consumer.batch.maxMessages": int64(500),
	} {
		v, found, _ := unstructured.NestedFieldNoCopy(got.Object, strings.Split(path, ".")...)
		if !found || v != want {
			t.Errorf("default %s = %v (found %v), want %v", path, v, found, want)
		}
	}
}
