package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// controlPlaneAssets runs hack/envtest.sh: the cached kube-apiserver and etcd,
// built from source on first use.
func controlPlaneAssets(ctx context.Context, root string, progress io.Writer) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "envtest.sh"))
	cmd.Dir = root
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("providing the envtest control plane: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// renderCRDs renders config/crd with kustomize: the CRDs the demo installs are
// the ones a user installs, not a second copy.
func renderCRDs(root string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(root, "config", "crd"))
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/crd: %w", err)
	}
	y, err := res.AsYaml()
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := dec.Decode(crd); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decoding rendered CRDs: %w", err)
		}
		if crd.Kind == "CustomResourceDefinition" {
			crds = append(crds, crd)
		}
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("kustomize build config/crd rendered no CRD")
	}
	return crds, nil
}

// startControlPlane starts kube-apiserver and etcd and installs the CRDs; it
// writes an admin kubeconfig for the operator process.
func startControlPlane(assets string, crds []*apiextensionsv1.CustomResourceDefinition, kubeconfigPath string) (*envtest.Environment, error) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crds},
	}
	if _, err := env.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	user, err := env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating the operator's kubeconfig: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	if err := os.WriteFile(kubeconfigPath, kc, 0o600); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return env, nil
}
