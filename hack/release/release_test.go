package release_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const root = "../.."

// mk runs make in the repository root.
func mk(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", root}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func decode(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// images collects every container image and every --consumer-image flag
// value anywhere in obj.
func images(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "image" {
				*out = append(*out, s)
			}
			images(x, out)
		}
	case []any:
		for _, x := range v {
			images(x, out)
		}
	case string:
		if img, ok := strings.CutPrefix(v, "--consumer-image="); ok {
			*out = append(*out, img)
		}
	}
}

// TestBuildInstaller renders the install as a release does and checks that
// every image in it, the operator's and the consumer image the manager
// defaults to, carries the release's tag; and that the CRD is in crds.yaml
// only, so that deleting install.yaml leaves it and every object, with the
// retention-decrease warning policy beside it.
func TestBuildInstaller(t *testing.T) {
	dist := t.TempDir()
	// -o manifests: the generated CRD is checked by verify-generated; don't
	// regenerate it into the tree from a test.
	mk(t, "-o", "manifests", "build-installer", "VERSION=v0.1.0", "REGISTRY=registry.example/team", "DIST="+dist)

	install := decode(t, filepath.Join(dist, "install.yaml"))
	var imgs []string
	kinds := map[string]int{}
	created := map[string]bool{}
	for _, o := range install {
		images(o.Object, &imgs)
		kinds[o.GetKind()]++
		// `kubectl apply -f install.yaml` creates in file order: a
		// namespace must come before everything in it.
		if ns := o.GetNamespace(); ns != "" && !created[ns] {
			t.Errorf("install.yaml has %s %s before its Namespace %s: kubectl apply fails with NotFound", o.GetKind(), o.GetName(), ns)
		}
		if o.GetKind() == "Namespace" {
			created[o.GetName()] = true
		}
	}
	if kinds["Deployment"] != 1 || kinds["CustomResourceDefinition"] != 0 {
		t.Errorf("install.yaml kinds %v: want the manager Deployment and no CRD", kinds)
	}
	want := map[string]bool{"registry.example/team/operator:v0.1.0": false, "registry.example/team/consumer:v0.1.0": false}
	for _, img := range imgs {
		if _, ok := want[img]; !ok {
			t.Errorf("install.yaml names image %q: want every image tagged v0.1.0 in registry.example/team", img)
		}
		want[img] = true
	}
	for img, seen := range want {
		if !seen {
			t.Errorf("install.yaml does not name %s (images: %v)", img, imgs)
		}
	}

	// crds.yaml carries every CRD of config/crd/bases and nothing else.
	bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("config/crd/bases: %v (%d files)", err, len(bases))
	}
	wantCRDs := map[string]bool{}
	for _, b := range bases {
		for _, o := range decode(t, b) {
			wantCRDs[o.GetName()] = false
		}
	}
	// Beside them, the API server's warning on a lower retention
	// (config/crd/retention_decrease_warning.yaml): it goes with the CRD.
	wantPolicy := map[string]bool{"ValidatingAdmissionPolicy": false, "ValidatingAdmissionPolicyBinding": false}
	for _, o := range decode(t, filepath.Join(dist, "crds.yaml")) {
		if _, ok := wantPolicy[o.GetKind()]; ok && o.GetName() == "retention-decrease.kafka.idempotency.dev" {
			wantPolicy[o.GetKind()] = true
			continue
		}
		if o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("crds.yaml has %s %s: want only CustomResourceDefinitions and the retention-decrease policy", o.GetKind(), o.GetName())
			continue
		}
		if _, ok := wantCRDs[o.GetName()]; !ok {
			t.Errorf("crds.yaml has CRD %s that config/crd/bases does not define", o.GetName())
		}
		wantCRDs[o.GetName()] = true
	}
	for name, seen := range wantCRDs {
		if !seen {
			t.Errorf("crds.yaml lacks CRD %s", name)
		}
	}
	for kind, seen := range wantPolicy {
		if !seen {
			t.Errorf("crds.yaml lacks %s retention-decrease.kafka.idempotency.dev", kind)
		}
	}
}

// TestBinariesPrintVersion builds the manager and the consumer as `make
// build` does and checks that both print the stamped version.
func TestBinariesPrintVersion(t *testing.T) {
	bin := t.TempDir()
	mk(t, "build", "VERSION=v0.1.0", "REVISION=0123abc", "BIN="+bin, "CMDS=./cmd/manager ./cmd/consumer")
	for _, name := range []string{"manager", "consumer"} {
		out, err := exec.Command(filepath.Join(bin, name), "--version").CombinedOutput()
		if err != nil {
			t.Errorf("%s --version: %v\n%s", name, err, out)
			continue
		}
		if got := string(out); !strings.HasPrefix(got, "v0.1.0 (revision 0123abc, go") {
			t.Errorf("%s --version printed %q, want v0.1.0 (revision 0123abc, go...)", name, got)
		}
	}
}

// TestDockerfileShipsTheTools: the images carry every command a user runs
// in a cluster (cmd/ but the development broker): built by the builder
// stage and copied into an image.
func TestDockerfileShipsTheTools(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	cmds, err := filepath.Glob(filepath.Join(root, "cmd", "*", "main.go"))
	if err != nil || len(cmds) == 0 {
		t.Fatalf("cmd/*/main.go: %v (%d)", err, len(cmds))
	}
	for _, m := range cmds {
		name := filepath.Base(filepath.Dir(m))
		if name == "devbroker" {
			continue // a development broker, never in an image
		}
		if !strings.Contains(df, " ./cmd/"+name) {
			t.Errorf("Dockerfile does not build ./cmd/%s", name)
		}
		if !strings.Contains(df, "COPY --from=builder /out/"+name+" /"+name) {
			t.Errorf("Dockerfile copies /out/%s into no image", name)
		}
	}
}
