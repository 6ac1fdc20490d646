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
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var consumerGVK = schema.GroupVersionKind{Group: "kafka.idempotency.dev", Version: "v1alpha1", Kind: "IdempotentConsumer"}

func sqlSink(stmt string) func(map[string]any) {
	return set("spec.consumer.sink", map[string]any{"type": "SQL", "sql": map[string]any{"statement": stmt}})
}

func consumerEnvList(names ...string) func(map[string]any) {
	var env []any
	for _, n := range names {
		env = append(env, map[string]any{"name": n, "value": "x"})
	}
	return set("spec.consumer.env", env)
}

// TestAdmissionRefusesHostileShapes: the two shapes issue 25 found
// accepted at admission are refused by the API server with a message that
// says why: a SQL-sink statement holding more than one statement, and a
// spec.consumer.env entry naming a variable the operator sets itself.
// Objects stored before the rules keep working (validation ratcheting):
// other fields can still be changed.
func TestAdmissionRefusesHostileShapes(t *testing.T) {
	te := startEnv(t, envOptions{noReconciler: true})
	ns := te.namespace(t)
	ctx := context.Background()
	create := func(name string, mods ...func(map[string]any)) error {
		obj := validObject(ns, name)
		for _, m := range mods {
			m(obj)
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetGroupVersionKind(consumerGVK)
		return te.c.Create(ctx, u)
	}

	var envRules, stmtRules apiextensionsv1.ValidationRules
	refused := []struct {
		name string
		mods []func(map[string]any)
		want string
	}{
		{"two statements", []func(map[string]any){sqlSink("INSERT INTO orders(id) VALUES ($1); DROP TABLE orders")}, "statement must hold one SQL statement"},
		{"a statement after a comment", []func(map[string]any){sqlSink("INSERT INTO orders(id) VALUES ($1); /* x */ DELETE FROM orders")}, "statement must hold one SQL statement"},
		{"a statement on the next line", []func(map[string]any){sqlSink("INSERT INTO orders(id) VALUES ($1);\n-- then\nTRUNCATE orders")}, "statement must hold one SQL statement"},
		{"a statement hidden behind a closed comment", []func(map[string]any){sqlSink("SELECT 1; /* a */ SELECT 2 /* b */")}, "statement must hold one SQL statement"},
		{"the database URL", []func(map[string]any){consumerEnvList("CONSUMER_DATABASE_URL")}, "CONSUMER_DATABASE_URL"},
		{"the fallback database URL", []func(map[string]any){consumerEnvList("EXTRA", "DATABASE_URL")}, "DATABASE_URL"},
		{"the topic", []func(map[string]any){consumerEnvList("CONSUMER_TOPIC")}, "the operator sets it"},
		{"the SQL statement", []func(map[string]any){consumerEnvList("CONSUMER_SINK_SQL_STATEMENT")}, "CONSUMER_SINK_SQL_STATEMENT"},
		{"the CA path", []func(map[string]any){consumerEnvList("PGSSLROOTCERT")}, "PGSSLROOTCERT"},
	}
	for i, tc := range refused {
		err := create(fmt.Sprintf("refused-%d", i), tc.mods...)
		switch {
		case err == nil:
			t.Errorf("%s: the API server accepted it", tc.name)
		case !apierrors.IsInvalid(err):
			t.Errorf("%s: got %v, want Invalid", tc.name, err)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: message %q does not contain %q", tc.name, err.Error(), tc.want)
		}
	}
	accepted := []struct {
		name string
		mods []func(map[string]any)
	}{
		{"one statement", []func(map[string]any){sqlSink("INSERT INTO orders(id, body) VALUES ($1, $2) ON CONFLICT DO NOTHING")}},
		{"a final semicolon", []func(map[string]any){sqlSink("INSERT INTO orders(id) VALUES ($1);")}},
		{"a final semicolon, spaces and comments", []func(map[string]any){sqlSink("INSERT INTO orders(id) VALUES ($1);  -- done\n /* really */ \n")}},
		{"two final semicolons", []func(map[string]any){sqlSink("INSERT INTO orders(id) VALUES ($1);;")}},
		{"a variable the consumer reads that the operator leaves alone", []func(map[string]any){consumerEnvList("CONSUMER_ENVELOPE", "CONSUMER_START_OFFSET", "OTHER")}},
	}
	for i, tc := range accepted {
		if err := create(fmt.Sprintf("accepted-%d", i), tc.mods...); err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
	}

	// Ratcheting: an object stored before the rules (made here by taking
	// them out of the CRD for a moment) can still be changed in its other
	// fields; changing the refused field to another refused value is not.
	crdKey := types.NamespacedName{Name: "idempotentconsumers.kafka.idempotency.dev"}
	crdScheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(crdScheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(te.cfg.Config, client.Options{Scheme: crdScheme})
	if err != nil {
		t.Fatal(err)
	}
	setRules := func(keep bool) {
		t.Helper()
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(ctx, crdKey, crd); err != nil {
			t.Fatal(err)
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		consumer := spec.Properties["consumer"]
		env := consumer.Properties["env"]
		sinkP := consumer.Properties["sink"]
		sqlP := sinkP.Properties["sql"]
		stmt := sqlP.Properties["statement"]
		if keep {
			env.XValidations, stmt.XValidations = envRules, stmtRules
		} else {
			envRules, stmtRules = env.XValidations, stmt.XValidations
			env.XValidations, stmt.XValidations = nil, nil
		}
		sqlP.Properties["statement"] = stmt
		sinkP.Properties["sql"] = sqlP
		consumer.Properties["sink"] = sinkP
		consumer.Properties["env"] = env
		spec.Properties["consumer"] = consumer
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		if err := crds.Update(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	hostile := []func(map[string]any){sqlSink("SELECT $1::text; SELECT 2"), consumerEnvList("CONSUMER_TOPIC")}
	setRules(false)
	eventually(t, 30*time.Second, "the CRD without the rules serves", func() (bool, string) {
		err := create("stored", hostile...)
		return err == nil, fmt.Sprint(err)
	})
	setRules(true)
	probe := 0
	eventually(t, 30*time.Second, "the CRD with the rules serves", func() (bool, string) {
		probe++
		err := create(fmt.Sprintf("probe-%d", probe), hostile...)
		return apierrors.IsInvalid(err), fmt.Sprint(err)
	})
	change := func(mutate func(u *unstructured.Unstructured)) error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(consumerGVK)
		return updateObject(te, u, ns, "stored", mutate)
	}
	if err := change(func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "consumer", "replicas")
		u.SetLabels(map[string]string{"edited": "yes"})
	}); err != nil {
		t.Errorf("a stored object with the refused shapes cannot be changed in its other fields (no ratcheting): %v", err)
	}
	if err := change(func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "SELECT $1::text; SELECT 3", "spec", "consumer", "sink", "sql", "statement")
	}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "statement must hold one SQL statement") {
		t.Errorf("a stored object's statement changed to another with two statements: %v, want Invalid", err)
	}
	if err := change(func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "CONSUMER_GROUP", "value": "x"}}, "spec", "consumer", "env")
	}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "CONSUMER_GROUP") {
		t.Errorf("a stored object's env changed to another reserved variable: %v, want Invalid", err)
	}
}
