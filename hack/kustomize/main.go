// Command kustomize renders a kustomization directory with the kustomize API
// pinned in go.mod, so the project needs no separately installed kustomize:
//
//	go run ./hack/kustomize build config/crd        # the CRD
//	go run ./hack/kustomize build config/default    # the operator, as committed
//	go run ./hack/kustomize installer -image REG/operator:v0.1.0 \
//	    -consumer-image REG/consumer:v0.1.0 config/default
//
// `installer` renders the operator with its image replaced and the manager's
// --consumer-image set, so that every image in the output carries the given
// tags: it is what `make build-installer` and `make deploy` (and the release
// workflow) use. The same code path is what the manifest tests check.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintln(stderr, "usage: kustomize build DIR\n       kustomize installer -image IMAGE -consumer-image IMAGE DIR")
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	var (
		out []byte
		err error
	)
	switch args[0] {
	case "build":
		if len(args) != 2 {
			return usage()
		}
		out, err = Build(args[1])
	case "installer":
		fs := flag.NewFlagSet("installer", flag.ContinueOnError)
		fs.SetOutput(stderr)
		image := fs.String("image", "", "the operator image, REPOSITORY:TAG or REPOSITORY@DIGEST")
		consumerImage := fs.String("consumer-image", "", "the consumer image the manager defaults to (--consumer-image)")
		if fs.Parse(args[1:]) != nil || fs.NArg() != 1 {
			return usage()
		}
		out, err = Installer(fs.Arg(0), *image, *consumerImage)
	default:
		return usage()
	}
	if err != nil {
		fmt.Fprintln(stderr, "kustomize:", err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintln(stderr, "kustomize: writing the output:", err)
		return 1
	}
	return 0
}

// Build renders the kustomization in dir as a multi-document YAML stream, in
// the order `kustomize build` and `kubectl kustomize` use by default (legacy:
// Namespaces, CRDs, ServiceAccounts and RBAC before the objects that need
// them), so that a single `kubectl apply -f` of the output succeeds.
func Build(dir string) ([]byte, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	k := krusty.MakeKustomizer(opts)
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", dir, err)
	}
	return res.AsYaml()
}

// managerDeployment is the manager's Deployment as config/default names it.
const managerDeployment = "idempotency-operator-controller-manager"

// Installer renders the operator kustomization in dir (config/default) with
// the manager's image set to image and its --consumer-image flag set to
// consumerImage. It does so through a throwaway overlay, so the committed
// kustomizations are never edited.
func Installer(dir, image, consumerImage string) ([]byte, error) {
	for name, ref := range map[string]string{"-image": image, "-consumer-image": consumerImage} {
		if err := checkImage(ref); err != nil {
			return nil, fmt.Errorf("%s %q: %w", name, ref, err)
		}
	}
	base, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", dir, err)
	}
	overlay, err := os.MkdirTemp("", "installer-")
	if err != nil {
		return nil, fmt.Errorf("creating the overlay: %w", err)
	}
	defer os.RemoveAll(overlay)
	// kustomize takes a base only by a relative path.
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		return nil, fmt.Errorf("locating %s from the overlay: %w", dir, err)
	}
	// strconv.Quote yields valid YAML double-quoted scalars for these values.
	k := `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ` + strconv.Quote(filepath.ToSlash(rel)) + `
patches:
- target:
    group: apps
    kind: Deployment
    name: ` + managerDeployment + `
  patch: |-
    - op: test
      path: /spec/template/spec/containers/0/name
      value: manager
    - op: replace
      path: /spec/template/spec/containers/0/image
      value: ` + strconv.Quote(image) + `
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: ` + strconv.Quote("--consumer-image="+consumerImage) + `
`
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil { //nolint:gosec // G306: a kustomization for kubectl to read, no secret in it
		return nil, fmt.Errorf("writing the overlay: %w", err)
	}
	out, err := Build(overlay)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(string(out), "name: "+managerDeployment+"\n") {
		return nil, fmt.Errorf("%s renders no Deployment %s to set the images of", dir, managerDeployment)
	}
	return out, nil
}

// checkImage accepts REPOSITORY:TAG and REPOSITORY@sha256:DIGEST: an image
// without a tag would silently mean :latest.
func checkImage(ref string) error {
	if ref == "" {
		return errors.New("is empty")
	}
	if strings.ContainsAny(ref, " \t\n\"'") {
		return errors.New("contains white space or quotes")
	}
	if strings.Contains(ref, "@sha256:") {
		return nil
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash || colon == len(ref)-1 {
		return errors.New("has no tag (REPOSITORY:TAG or REPOSITORY@sha256:DIGEST)")
	}
	if tag := ref[colon+1:]; tag == "latest" {
		return errors.New("uses the tag latest, which names no particular build")
	}
	return nil
}
