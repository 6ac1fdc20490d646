package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestUninstallRefusesWhenItCannotList: `make uninstall` deletes the CRD only
// when it has seen that no IdempotentConsumer is left. A user who may delete
// CRDs but not list the objects (or an API server that times out) must get a
// refusal, not a deleted CRD and with it every object in the cluster.
func TestUninstallRefusesWhenItCannotList(t *testing.T) {
	dir := assets(t)
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	tmp := t.TempDir()
	kubeconfigOf := func(u envtest.User) string {
		au, err := env.AddUser(u, nil)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := au.KubeConfig()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(tmp, u.Name+".kubeconfig")
		if err := os.WriteFile(p, kc, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	admin := kubeconfigOf(envtest.User{Name: "admin", Groups: []string{"system:masters"}})
	ops := kubeconfigOf(envtest.User{Name: "ops"})
	kubectlBin := filepath.Join(dir, "kubectl")
	run := func(kcfg string, name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
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
	must(run(admin, "make", "--no-print-directory", "-C", root, "-o", "manifests", "KUBECTL="+kubectlBin, "install"))
	must(run(admin, kubectlBin, "wait", "--for=condition=Established", crd, "--timeout=60s"))
	must(run(admin, kubectlBin, "apply", "-n", "default", "-k", filepath.Join(root, "config", "samples")))
	// ops may manage CRDs but not read IdempotentConsumers.
	must(run(admin, kubectlBin, "create", "clusterrole", "crd-admin", "--verb=get,list,delete",
		"--resource=customresourcedefinitions.apiextensions.k8s.io"))
	must(run(admin, kubectlBin, "create", "clusterrolebinding", "ops-crd-admin", "--clusterrole=crd-admin", "--user=ops"))

	out, err := run(ops, "make", "--no-print-directory", "-C", root, "-o", "manifests", "KUBECTL="+kubectlBin, "uninstall")
	if err == nil {
		t.Errorf("make uninstall by a user who cannot list IdempotentConsumers succeeded:\n%s", out)
	}
	if _, gerr := run(admin, kubectlBin, "get", crd); gerr != nil {
		t.Fatalf("make uninstall deleted the CRD (and every IdempotentConsumer) without having listed them; output:\n%s", out)
	}
	if !strings.Contains(out, "uninstall:") {
		t.Errorf("make uninstall failed without saying why:\n%s", out)
	}
}
