package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// crdName is the CRD as kubectl names it.
const crdName = "crd/idempotentconsumers.kafka.idempotency.dev"

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

// startAPIServer starts kube-apiserver and etcd, stopped when the test ends,
// and returns them and the directory of their binaries (and kubectl).
func startAPIServer(t *testing.T) (*envtest.Environment, string) {
	t.Helper()
	dir := assets(t)
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env, dir
}

// kubeconfigFor adds user u to env and writes its kubeconfig into dir.
func kubeconfigFor(t *testing.T, env *envtest.Environment, u envtest.User, dir string) string {
	t.Helper()
	au, err := env.AddUser(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := au.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, u.Name+".kubeconfig")
	if err := os.WriteFile(p, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runAs runs name with KUBECONFIG=kcfg and returns its combined output.
func runAs(kcfg, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kcfg)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustFor returns a check for a command's (output, error) that fails t,
// with the output, on an error, and returns the output otherwise.
func mustFor(t *testing.T) func(string, error) string {
	return func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
}
