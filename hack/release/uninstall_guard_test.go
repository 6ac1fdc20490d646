package release_test

import (
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
	env, dir := startAPIServer(t)
	tmp := t.TempDir()
	admin := kubeconfigFor(t, env, envtest.User{Name: "admin", Groups: []string{"system:masters"}}, tmp)
	ops := kubeconfigFor(t, env, envtest.User{Name: "ops"}, tmp)
	kubectlBin := filepath.Join(dir, "kubectl")
	must := mustFor(t)
	must(runAs(admin, "make", "--no-print-directory", "-C", root, "-o", "manifests", "KUBECTL="+kubectlBin, "install"))
	must(runAs(admin, kubectlBin, "wait", "--for=condition=Established", crdName, "--timeout=60s"))
	must(runAs(admin, kubectlBin, "apply", "-n", "default", "-k", filepath.Join(root, "config", "samples")))
	// ops may manage CRDs but not read IdempotentConsumers.
	must(runAs(admin, kubectlBin, "create", "clusterrole", "crd-admin", "--verb=get,list,delete",
		"--resource=customresourcedefinitions.apiextensions.k8s.io"))
	must(runAs(admin, kubectlBin, "create", "clusterrolebinding", "ops-crd-admin", "--clusterrole=crd-admin", "--user=ops"))

	out, err := runAs(ops, "make", "--no-print-directory", "-C", root, "-o", "manifests", "KUBECTL="+kubectlBin, "uninstall")
	if err == nil {
		t.Errorf("make uninstall by a user who cannot list IdempotentConsumers succeeded:\n%s", out)
	}
	if _, gerr := runAs(admin, kubectlBin, "get", crdName); gerr != nil {
		t.Fatalf("make uninstall deleted the CRD (and every IdempotentConsumer) without having listed them; output:\n%s", out)
	}
	if !strings.Contains(out, "uninstall:") {
		t.Errorf("make uninstall failed without saying why:\n%s", out)
	}
}
