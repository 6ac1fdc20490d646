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
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/sink"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// crdRules returns the CEL rules of the generated CRD at a schema path of
// property names (from spec).
func crdRules(t *testing.T, path ...string) apiextensionsv1.ValidationRules {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "kafka.idempotency.dev_idempotentconsumers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	p := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for _, name := range path {
		var ok bool
		if p, ok = p.Properties[name]; !ok {
			t.Fatalf("the CRD has no property %s (in %v)", name, path)
		}
	}
	return p.XValidations
}

// TestReservedEnvAgreesWithTheCRD: the names the CEL rule on
// spec.consumer.env refuses are objects.ReservedEnv, and every variable
// the Deployment builder sets, for any object, is among them.
func TestReservedEnvAgreesWithTheCRD(t *testing.T) {
	rules := crdRules(t, "consumer", "env")
	one := regexp.MustCompile(`^self\.all\(e, e\.name != '([A-Z][A-Z0-9_]*)'\)$`)
	var got []string
	for _, r := range rules {
		m := one.FindStringSubmatch(r.Rule)
		if m == nil {
			t.Errorf("spec.consumer.env rule %q is not self.all(e, e.name != 'NAME')", r.Rule)
			continue
		}
		if !strings.HasPrefix(r.Message, "env "+m[1]+":") {
			t.Errorf("the rule refusing %s says %q, not the name first", m[1], r.Message)
		}
		got = append(got, m[1])
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(objects.ReservedEnv))
	if !slices.Equal(got, want) {
		t.Errorf("the CEL rules refuse %v,\nobjects.ReservedEnv is %v", got, want)
	}

	// Every variable the builder sets, with every option on.
	sinks := []kafkav1alpha1.SinkSpec{
		{Type: kafkav1alpha1.SinkHTTP, HTTP: &kafkav1alpha1.HTTPSinkSpec{URL: "https://x", Timeout: &metav1.Duration{Duration: 1}, AuthorizationSecretRef: &kafkav1alpha1.SecretKeyRef{Name: "a", Key: "b"}}},
		{Type: kafkav1alpha1.SinkSQL, SQL: &kafkav1alpha1.SQLSinkSpec{Statement: "SELECT 1"}},
		{Type: kafkav1alpha1.SinkLog},
		{Type: kafkav1alpha1.SinkNone},
	}
	for _, s := range sinks {
		obj := builtObject()
		obj.Spec.Consumer.Sink = s
		obj.Spec.Consumer.Ordering = kafkav1alpha1.OrderingPartition
		obj.Spec.Consumer.MaxInFlight = ptr.To(int32(4))
		obj.Spec.Kafka.TLS = &kafkav1alpha1.KafkaTLS{InsecureSkipVerify: true,
			CASecretRef:         &kafkav1alpha1.SecretKeyRef{Name: "ca", Key: "ca.crt"},
			ClientCertSecretRef: &kafkav1alpha1.SecretKeyRef{Name: "client", Key: "tls.crt"},
			ClientKeySecretRef:  &kafkav1alpha1.SecretKeyRef{Name: "client", Key: "tls.key"}}
		obj.Spec.Kafka.SASL = &kafkav1alpha1.KafkaSASL{Mechanism: "PLAIN",
			UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: "k", Key: "u"}, PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: "k", Key: "p"}}
		obj.Spec.Database.CASecretRef = &kafkav1alpha1.SecretKeyRef{Name: "pg-ca", Key: "ca.crt"}
		for _, e := range objects.Deployment(obj, objects.Options{}).Spec.Template.Spec.Containers[0].Env {
			if !slices.Contains(objects.ReservedEnv, e.Name) {
				t.Errorf("sink %s: the builder sets %s, which objects.ReservedEnv (and so the API) does not reserve", s.Type, e.Name)
			}
		}
	}
}

// sqlStatementRule is the regular expression of the CEL rule on the SQL
// sink's statement, as the generated CRD has it.
func sqlStatementRule(t *testing.T) *regexp.Regexp {
	t.Helper()
	rules := crdRules(t, "consumer", "sink", "sql", "statement")
	if len(rules) != 1 {
		t.Fatalf("statement has %d CEL rules, want 1", len(rules))
	}
	m := regexp.MustCompile(`^self\.matches\(r'(.*)'\)$`).FindStringSubmatch(rules[0].Rule)
	if m == nil {
		t.Fatalf("the statement rule %q is not self.matches(r'...')", rules[0].Rule)
	}
	return regexp.MustCompile(m[1]) // CEL's matches is RE2, as Go's regexp
}

// TestSQLStatementRuleAgreesWithTheRuntime: a statement the CRD's rule
// accepts is one PostgreSQL prepares as the consumer's SQL sink does (its
// Check, run at start); one it refuses for a second statement PostgreSQL
// refuses too. The rule is stricter in one documented way: a ';' inside a
// literal or a comment before the end.
func TestSQLStatementRuleAgreesWithTheRuntime(t *testing.T) {
	rule := sqlStatementRule(t)
	conn := pgConn(t, consumertest.DatabaseURL(t))
	ctx := context.Background()
	for _, c := range []struct {
		stmt         string
		cel, runtime bool // accepted by each
	}{
		{"SELECT $1::text", true, true},
		{"SELECT $1::text;", true, true},
		{"SELECT $1::text ;; ", true, true},
		{"SELECT $1::text; -- the end\n", true, true},
		{"SELECT $1::text; /* the ** end */ -- really", true, true},
		{"SELECT $1::text -- no ; here\n", false, true},   // stricter: ';' in a comment
		{"SELECT 'a;b' || $1::text", false, true},         // stricter: ';' in a literal
		{"SELECT 'a' || chr(59) || $1::text", true, true}, // the documented way
		{"SELECT $1::text; SELECT 2", false, false},       // two statements
		{"SELECT $1::text;\nDELETE FROM pg_class", false, false},
		{"SELECT $1::text; /* x */ SELECT 2 /* y */", false, false},
		{"SELECT $1::text; -- x\nSELECT 2", false, false},
		{"SELECT $1::text; /* x ; */ SELECT 2", false, false},
	} {
		if got := rule.MatchString(c.stmt); got != c.cel {
			t.Errorf("%q: the CRD rule accepts it: %t, want %t", c.stmt, got, c.cel)
		}
		err := sink.SQLConfig{Statement: c.stmt}.Check(ctx, conn)
		if (err == nil) != c.runtime {
			t.Errorf("%q: the runtime's check: %v, want accepted %t", c.stmt, err, c.runtime)
		}
		if c.cel && !c.runtime {
			t.Errorf("%q: the API accepts a statement the consumer refuses at start", c.stmt)
		}
		if !c.runtime && err != nil && !strings.Contains(err.Error(), "multiple commands") {
			t.Errorf("%q: the runtime refused it for another reason: %v", c.stmt, err)
		}
	}
}
