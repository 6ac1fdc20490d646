package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// assets finds kube-apiserver, etcd and kubectl: KUBEBUILDER_ASSETS, or the
// cached build of hack/envtest.sh (which builds it on first use).
func assets(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	out, err := exec.Command(filepath.Join(root, "hack", "envtest.sh")).Output()
	if err != nil {
		t.Fatalf("no KUBEBUILDER_ASSETS and hack/envtest.sh failed: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestInstallDeployUndeployUninstall runs the Makefile's cluster targets
// against a real API server, in the order getting-started.md gives: the CRD
// goes in and out on its own, removing the operator leaves the CRD and the
// objects, and `make uninstall` refuses while an object exists.
func TestInstallDeployUndeployUninstall(t *testing.T) {
	dir := assets(t)
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	kcfg := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kcfg, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	// envtest runs no controllers, so a deleted Namespace never finishes
	// terminating: kubectl must not wait for deletions here.
	wrapper := filepath.Join(tmp, "kubectl")
	script := "#!/bin/sh\nif [ \"$1\" = delete ]; then shift; exec " + filepath.Join(dir, "kubectl") + " delete --wait=false \"$@\"; fi\nexec " + filepath.Join(dir, "kubectl") + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, error) {
		cmd := exec.Command(wrapper, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kcfg)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mkc := func(args ...string) (string, error) {
		// -o manifests: don't regenerate the CRD into the tree from a test.
		cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", root, "-o", "manifests", "KUBECTL=" + wrapper, "VERSION=v0.1.0"}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kcfg)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	const crd = "crd/idempotentconsumers.kafka.idempotency.dev"

	must(mkc("install"))
	must(kubectl("wait", "--for=condition=Established", crd, "--timeout=60s"))
	must(mkc("deploy"))
	if img := must(kubectl("-n", "idempotency-system", "get", "deploy/idempotency-operator-controller-manager",
		"-o", "jsonpath={.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].args}")); !strings.Contains(img, "operator:v0.1.0 ") ||
		!strings.Contains(img, "--consumer-image=ghcr.io/idempotency-dev/consumer:v0.1.0") {
		t.Errorf("deployed manager: %s", img)
	}
	must(kubectl("apply", "-n", "default", "-k", filepath.Join(root, "config", "samples")))

	// Removing the operator leaves the CRD and the objects.
	must(mkc("undeploy"))
	must(kubectl("get", crd))
	if out := must(kubectl("get", "ic", "-n", "default", "-o", "name")); !strings.Contains(out, "ledger") || !strings.Contains(out, "billing") {
		t.Errorf("after undeploy the objects are gone: %q", out)
	}

	// Removing the CRD is refused while objects exist, and changes nothing.
	out, err := mkc("uninstall")
	if err == nil || !strings.Contains(out, "refusing") || !strings.Contains(out, "ledger") {
		t.Errorf("make uninstall with objects left: err %v, output:\n%s", err, out)
	}
	must(kubectl("get", crd))

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
		if _, err := kubectl("get", crd); err != nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("the CRD is still there after make uninstall")
		}
	}
}
