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
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/controllers/objects"
)

func TestParseWatchNamespaces(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "a", want: []string{"a"}},
		{in: "team-a, team-b,team-a", want: []string{"team-a", "team-b"}},
		{in: "a,,b", wantErr: "entry 2 is empty"},
		{in: "a,", wantErr: "entry 2 is empty"},
		{in: "Team_A", wantErr: `"Team_A" is not a namespace name`},
	} {
		got, err := ParseWatchNamespaces(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseWatchNamespaces(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseWatchNamespaces(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// namespacedInstall is what the test takes from config/namespaced.
type namespacedInstall struct {
	rbac            []*unstructured.Unstructured // Namespaces, ServiceAccounts, (Cluster)Roles and their bindings
	user            string                       // the manager's ServiceAccount as an API user
	namespace       string                       // the manager's own namespace
	watchNamespaces []string                     // from the manager Deployment's --watch-namespaces
}

// renderNamespacedInstall builds config/namespaced with the kustomize API
// pinned in go.mod (what `kustomize build` runs).
func renderNamespacedInstall(t *testing.T) namespacedInstall {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join("..", "config", "namespaced"))
	if err != nil {
		t.Fatalf("building config/namespaced: %v", err)
	}
	var in namespacedInstall
	for _, res := range resMap.Resources() {
		m, err := res.Map()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		switch u.GetKind() {
		case "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			in.rbac = append(in.rbac, u)
		case "Deployment":
			dep := &appsv1.Deployment{}
			if err := runtimeConvert(m, dep); err != nil {
				t.Fatal(err)
			}
			in.user = "system:serviceaccount:" + dep.Namespace + ":" + dep.Spec.Template.Spec.ServiceAccountName
			in.namespace = dep.Namespace
			for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--watch-namespaces="); ok {
					if in.watchNamespaces, err = ParseWatchNamespaces(v); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	// Namespaces before what goes in them.
	slices.SortStableFunc(in.rbac, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
	})
	if in.user == "" || len(in.watchNamespaces) == 0 {
		t.Fatalf("config/namespaced: no manager Deployment with --watch-namespaces (user %q, namespaces %q)", in.user, in.watchNamespaces)
	}
	return in
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func runtimeConvert(m map[string]any, into any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	Stage            string `json:"stage"`
	Verb             string `json:"verb"`
	User             struct{ Username string }
	ImpersonatedUser *struct{ Username string } `json:"impersonatedUser"`
	ObjectRef        *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// TestNamespacedInstall runs the manager the way config/namespaced installs
// it: as its ServiceAccount (impersonated), with only the RBAC the overlay
// renders, and with the overlay's --watch-namespaces. The API server's
// audit log records every request, so the test can show the manager never
// asked for anything (a Secret above all) outside the watched namespace and
// its own.
func TestNamespacedInstall(t *testing.T) {
	in := renderNamespacedInstall(t)
	watched := in.watchNamespaces[0]
	const other = "team-b"
	if slices.Contains(in.watchNamespaces, other) {
		t.Fatalf("the overlay watches %s, which the test uses as the unwatched namespace", other)
	}

	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	auditLog := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
`), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	te := startEnv(t, envOptions{
		watchNamespaces: in.watchNamespaces,
		managerUser:     in.user,
		// The Lease in the manager's namespace, under the overlay's Role.
		leaderElectionNamespace: in.namespace,
		// The config-hash key Secret too, under the overlay's Role for it.
		options: Options{ConfigHashKeyNamespace: in.namespace},
		apiServerArgs: map[string][]string{
			"audit-policy-file": {policy},
			"audit-log-path":    {auditLog},
		},
		setup: func(t *testing.T, c client.Client) {
			for _, ns := range []string{watched, other} {
				if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
					t.Fatal(err)
				}
			}
			for _, u := range in.rbac {
				if err := c.Create(ctx, u.DeepCopy()); err != nil {
					t.Fatalf("installing %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
				}
			}
		},
	})

	// The overlay's RBAC, as the API server judges it.
	restCfg := rest.CopyConfig(te.cfg.Config)
	restCfg.Impersonate = rest.ImpersonationConfig{UserName: in.user}
	sa, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var secrets corev1.SecretList
	if err := sa.List(ctx, &secrets); !apierrors.IsForbidden(err) {
		t.Errorf("cluster-wide Secret list as %s: err = %v, want Forbidden", in.user, err)
	}
	if err := sa.List(ctx, &secrets, client.InNamespace(other)); !apierrors.IsForbidden(err) {
		t.Errorf("Secret list in %s as %s: err = %v, want Forbidden", other, in.user, err)
	}
	if err := sa.List(ctx, &secrets, client.InNamespace(watched)); err != nil {
		t.Errorf("Secret list in %s as %s: %v, want allowed", watched, in.user, err)
	}
	var deps appsv1.DeploymentList
	if err := sa.List(ctx, &deps); !apierrors.IsForbidden(err) {
		t.Errorf("cluster-wide Deployment list as %s: err = %v, want Forbidden", in.user, err)
	}

	dbURL := consumertest.DatabaseURL(t)
	// The unwatched object first: by the time the watched one is Ready, a
	// manager that saw it would have reconciled it too.
	te.secret(t, other, "db", map[string]string{"url": dbURL})
	te.create(t, newConsumer(other, "ignored", withTable("ignored_event"), withDeletionPolicy(kafkav1alpha1.DeletionDelete)))
	te.secret(t, watched, "db", map[string]string{"url": dbURL})
	te.create(t, newConsumer(watched, "served", withTable("served_event"), withDeletionPolicy(kafkav1alpha1.DeletionDelete)))
	got := te.waitReady(t, watched, "served")
	if !slices.Contains(got.Finalizers, Finalizer) {
		t.Errorf("%s/served: finalizers = %v, want %s", watched, got.Finalizers, Finalizer)
	}
	lease := &coordinationv1.Lease{}
	if err := te.c.Get(ctx, types.NamespacedName{Namespace: in.namespace, Name: "idempotency-operator.kafka.idempotency.dev"}, lease); err != nil {
		t.Errorf("leader election Lease in %s: %v", in.namespace, err)
	}
	if len(te.events(t, watched, "served")) == 0 {
		t.Errorf("%s/served: no Events recorded by the namespaced manager", watched)
	}

	time.Sleep(time.Second)
	ignored := te.get(t, other, "ignored")
	if len(ignored.Status.Conditions) != 0 || len(ignored.Finalizers) != 0 || ignored.Status.ObservedGeneration != 0 {
		t.Errorf("%s/ignored was reconciled by a manager watching %q: finalizers %v, %s", other, in.watchNamespaces, ignored.Finalizers, conditionsSummary(ignored))
	}
	if err := te.c.Get(ctx, types.NamespacedName{Namespace: other, Name: objects.DeploymentName(ignored)}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment of %s/ignored: err = %v, want NotFound", other, err)
	}
	if logs := te.logs.String(); strings.Contains(strings.ToLower(logs), "forbidden") {
		t.Errorf("the manager hit a permission it lacks:\n%s", logs)
	}

	// Every request the manager made, from the audit log.
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inWatched, ownSecrets []string
	refusedOutside := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit log line %q: %v", sc.Text(), err)
		}
		if ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != in.user || ev.ObjectRef == nil {
			continue // discovery has no objectRef
		}
		ref := ev.ObjectRef
		if !slices.Contains(in.watchNamespaces, ref.Namespace) && ref.Namespace != in.namespace {
			if ev.ResponseStatus == nil || ev.ResponseStatus.Code != 403 {
				t.Errorf("the manager's identity was allowed %s %s in namespace %q (empty: cluster-wide)", ev.Verb, ref.Resource, ref.Namespace)
			}
			refusedOutside++
		}
		if ref.Resource == "secrets" && ref.Namespace == in.namespace {
			// Only the config-hash key: read by name, created once.
			if (ev.Verb != "get" || ref.Name != DefaultConfigHashKeySecret) && ev.Verb != "create" {
				t.Errorf("the manager's identity asked for %s secrets %q in its own namespace", ev.Verb, ref.Name)
			}
			if ev.ResponseStatus == nil || ev.ResponseStatus.Code >= 300 && ev.ResponseStatus.Code != 404 {
				t.Errorf("the manager's %s of the config-hash key Secret in %s was refused: %+v", ev.Verb, in.namespace, ev.ResponseStatus)
			}
			ownSecrets = append(ownSecrets, ev.Verb)
		}
		if ref.Resource == "secrets" && ref.Namespace == watched {
			inWatched = append(inWatched, ev.Verb)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// The test's own three probes above (Secrets cluster-wide and in the
	// other namespace, Deployments cluster-wide) are the only requests
	// outside; the manager made none.
	if refusedOutside != 3 {
		t.Errorf("audit log: %d refused requests outside %s by %s, want the test's own 3", refusedOutside, watched, in.user)
	}
	if !slices.Contains(ownSecrets, "create") {
		t.Errorf("audit log: the manager did not create its config-hash key Secret in %s (saw %q)", in.namespace, ownSecrets)
	}
	var sl corev1.SecretList
	if err := sa.List(ctx, &sl, client.InNamespace(in.namespace)); !apierrors.IsForbidden(err) {
		t.Errorf("Secret list in the manager's namespace %s as %s: err = %v, want Forbidden", in.namespace, in.user, err)
	}
	// Not vacuous: the manager's Secret watch and its read of the URL are there.
	for _, verb := range []string{"list", "watch", "get"} {
		if !slices.Contains(inWatched, verb) {
			t.Errorf("audit log: no %s of secrets in %s by %s (saw %q)", verb, watched, in.user, inWatched)
		}
	}
}
