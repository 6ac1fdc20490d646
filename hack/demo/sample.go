package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// applySample creates the demo namespace, the database Secret the sample
// refers to (holding the throwaway PostgreSQL's URL), and the sample object
// with its bootstrap servers pointed at the local broker.
func applySample(ctx context.Context, k8s client.Client, path string, brokers []string, dbURL string) (*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading sample: %w", err)
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}); err != nil {
		return nil, err
	}
	var ic *unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decoding sample: %w", err)
		}
		if u.Object == nil {
			continue
		}
		if u.GetKind() == "IdempotentConsumer" {
			ic = u
		}
	}
	if ic == nil {
		return nil, fmt.Errorf("%s holds no IdempotentConsumer", path)
	}
	ic.SetNamespace(demoNamespace)
	if err := unstructured.SetNestedStringSlice(ic.Object, brokers, "spec", "kafka", "bootstrapServers"); err != nil {
		return nil, err
	}
	secretName, _, _ := unstructured.NestedString(ic.Object, "spec", "database", "urlSecretRef", "name")
	secretKey, _, _ := unstructured.NestedString(ic.Object, "spec", "database", "urlSecretRef", "key")
	if secretName == "" || secretKey == "" {
		return nil, fmt.Errorf("sample has no spec.database.urlSecretRef name and key")
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: demoNamespace},
		StringData: map[string]string{secretKey: dbURL},
	}
	if err := k8s.Create(ctx, secret); err != nil {
		return nil, fmt.Errorf("creating Secret %s: %w", secretName, err)
	}
	if err := k8s.Create(ctx, ic); err != nil {
		return nil, fmt.Errorf("creating the IdempotentConsumer: %w", err)
	}
	return ic, nil
}

// waitForDeployment waits until the object is Ready... or at least until its
// table is ready and the Deployment exists (no Pods run here, so the
// Deployment never becomes available and ConsumerReady stays false).
func waitForDeployment(ctx context.Context, k8s client.Client, ic *unstructured.Unstructured, mgr *proc.Process) (*appsv1.Deployment, error) {
	deadline := time.Now().Add(2 * time.Minute)
	key := types.NamespacedName{Namespace: ic.GetNamespace(), Name: ic.GetName()}
	var lastConds string
	for time.Now().Before(deadline) {
		cur := ic.DeepCopy()
		if err := k8s.Get(ctx, key, cur); err == nil {
			lastConds = conditionSummary(cur)
			partitionsReady := conditionTrue(cur, "PartitionsReady")
			depName, _, _ := unstructured.NestedString(cur.Object, "status", "deploymentName")
			if depName == "" {
				depName = ic.GetName()
			}
			dep := &appsv1.Deployment{}
			if partitionsReady {
				if err := k8s.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: depName}, dep); err == nil {
					return dep, nil
				}
			}
		}
		if mgr.Exited() {
			return nil, fmt.Errorf("the operator exited: %w\n%s", mgr.ExitErr(), mgr.TailLog(30))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no Deployment and ready partitions within 2 minutes; conditions: %s\noperator log:\n%s", lastConds, mgr.TailLog(30))
}

func conditions(u *unstructured.Unstructured) []map[string]any {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []map[string]any
	for _, c := range raw {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	for _, c := range conditions(u) {
		if c["type"] == typ {
			return c["status"] == "True"
		}
	}
	return false
}

func conditionSummary(u *unstructured.Unstructured) string {
	var parts []string
	for _, c := range conditions(u) {
		parts = append(parts, fmt.Sprintf("%v=%v (%v)", c["type"], c["status"], c["reason"]))
	}
	return strings.Join(parts, ", ")
}

// waitForCondition waits until the object's condition is True.
func waitForCondition(ctx context.Context, k8s client.Client, ic *unstructured.Unstructured, typ string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	key := client.ObjectKeyFromObject(ic)
	last := ""
	for time.Now().Before(deadline) {
		cur := ic.DeepCopy()
		if err := k8s.Get(ctx, key, cur); err == nil {
			if conditionTrue(cur, typ) {
				return nil
			}
			last = conditionSummary(cur)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("condition %s not True within %s: %s", typ, timeout, last)
}
