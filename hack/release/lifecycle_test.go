package release_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestInstallDeployUndeployUninstall runs the Makefile's cluster targets
// against a real API server, in the order getting-started.md gives: the CRD
// goes in and out on its own, removing the operator leaves the CRD and the
// objects, and `make uninstall` refuses while an object exists.
func TestInstallDeployUndeployUninstall(t *testing.T) {
	env, dir := startAPIServer(t)
	tmp := t.TempDir()
	kcfg := kubeconfigFor(t, env, envtest.User{Name: "admin", Groups: []string{"system:masters"}}, tmp)
	// envtest runs no controllers, so a deleted Namespace never finishes
	// terminating: kubectl must not wait for deletions here.
	wrapper := filepath.Join(tmp, "kubectl")
	script := "#!/bin/sh\nif [ \"$1\" = delete ]; then shift; exec " + filepath.Join(dir, "kubectl") + " delete --wait=false \"$@\"; fi\nexec " + filepath.Join(dir, "kubectl") + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, error) { return runAs(kcfg, wrapper, args...) }
	mkc := func(args ...string) (string, error) {
		// -o manifests: don't regenerate the CRD into the tree from a test.
		return runAs(kcfg, "make", append([]string{"--no-print-directory", "-C", root, "-o", "manifests", "KUBECTL=" + wrapper, "VERSION=v0.1.0"}, args...)...)
	}
	must := mustFor(t)

	must(mkc("install"))
	must(kubectl("wait", "--for=condition=Established", crdName, "--timeout=60s"))
	must(mkc("deploy"))
	if img := must(kubectl("-n", "idempotency-system", "get", "deploy/idempotency-operator-controller-manager",
		"-o", "jsonpath={.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].args}")); !strings.Contains(img, "operator:v0.1.0 ") ||
		!strings.Contains(img, "--consumer-image=ghcr.io/idempotency-dev/consumer:v0.1.0") {
		t.Errorf("deployed manager: %s", img)
	}
	must(kubectl("apply", "-n", "default", "-k", filepath.Join(root, "config", "samples")))

	// `make install` brought the API server's warning on a lower retention
	// along with the CRD: kubectl apply of a typo (24h for 168h) prints it.
	// The policy takes effect a moment after it is created, so wait on dry
	// runs first.
	sample, err := os.ReadFile(filepath.Join(root, "config", "samples", "kafka_v1alpha1_idempotentconsumer_ledger.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lowered := filepath.Join(tmp, "ledger-24h.yaml")
	if !strings.Contains(string(sample), "retention: 168h") {
		t.Fatal("the ledger sample no longer says retention: 168h")
	}
	if err := os.WriteFile(lowered, []byte(strings.Replace(string(sample), "retention: 168h", "retention: 24h", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	const warning = "spec.dedup.retention is lowered from 168h to 24h"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out := must(kubectl("apply", "-n", "default", "--dry-run=server", "-f", lowered)); strings.Contains(out, warning) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("kubectl apply --dry-run=server of a lower retention printed no warning within 30s:\n%s", out)
		}
	}
	if out := must(kubectl("apply", "-n", "default", "-f", lowered)); !strings.Contains(out, "Warning: ") || !strings.Contains(out, warning) {
		t.Errorf("kubectl apply of a lower retention printed:\n%s\nwant a Warning saying %q", out, warning)
	}

	// Removing the operator leaves the CRD and the objects.
	must(mkc("undeploy"))
	must(kubectl("get", crdName))
	if out := must(kubectl("get", "ic", "-n", "default", "-o", "name")); !strings.Contains(out, "ledger") || !strings.Contains(out, "billing") {
		t.Errorf("after undeploy the objects are gone: %q", out)
	}

	// Removing the CRD is refused while objects exist, and changes nothing.
	out, err := mkc("uninstall")
	if err == nil || !strings.Contains(out, "refusing") || !strings.Contains(out, "ledger") {
		t.Errorf("make uninstall with objects left: err %v, output:\n%s", err, out)
	}
	must(kubectl("get", crdName))

	// Once they are gone, it removes the CRD.
	must(kubectl("delete", "ic", "--all", "-n", "default"))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out := must(kubectl("get", "ic", "-n", "default", "-o", "name")); strings.TrimSpace(out) == "" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("objects not gone: %s", out)
		}
	}
	must(mkc("uninstall"))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := kubectl("get", crdName); err != nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("the CRD is still there after make uninstall")
		}
	}
}
