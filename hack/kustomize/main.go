// Command kustomize renders a kustomization directory with the kustomize API
// pinned in go.mod, so the project needs no separately installed kustomize:
//
//	go run ./hack/kustomize build config/default > install.yaml
//
// It supports the `build DIR` form only; it is what `make build-installer` and
// the local demo use, and the same code path the manifest tests check.
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "build" {
		fmt.Fprintln(os.Stderr, "usage: kustomize build DIR")
		os.Exit(2)
	}
	out, err := Build(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kustomize:", err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}

// Build renders the kustomization in dir as a multi-document YAML stream.
func Build(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", dir, err)
	}
	return res.AsYaml()
}
