package localstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// The control plane (kube-apiserver and etcd, no controllers or kubelet) and
// the consumer Deployments' replicas as local processes: shared by the demo
// and the upgrade test (hack/upgrade).

// ControlPlaneAssets runs hack/envtest.sh: the cached kube-apiserver and etcd,
// built from source on first use.
func ControlPlaneAssets(ctx context.Context, root string, progress io.Writer) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "envtest.sh")) //nolint:gosec // G204: this repository's own script
	cmd.Dir = root
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("providing the envtest control plane: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RenderCRDs renders config/crd with kustomize: the CRDs a local stack installs are
// the ones a user installs, not a second copy.
func RenderCRDs(root string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
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

// StartControlPlane starts kube-apiserver and etcd and installs the CRDs; it
// writes an admin kubeconfig for an operator process.
func StartControlPlane(assets string, crds []*apiextensionsv1.CustomResourceDefinition, kubeconfigPath string) (*envtest.Environment, error) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crds},
	}
	if _, err := env.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	user, err := env.AddUser(envtest.User{Name: "local-admin", Groups: []string{"system:masters"}}, nil)
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

// StartReplicas starts one local process per replica from the Deployment's
// first container: its command and args, and its env with Secret and field
// references resolved as the kubelet would. The only change is the listen
// address (see StartConsumer).
func StartReplicas(ctx context.Context, k8s client.Client, dep *appsv1.Deployment, binary, work string, verbose io.Writer) ([]*Consumer, error) {
	spec := dep.Spec.Template.Spec
	if len(spec.Containers) == 0 {
		return nil, fmt.Errorf("deployment %s has no containers", dep.Name)
	}
	c := spec.Containers[0]
	replicas := 1
	if dep.Spec.Replicas != nil {
		replicas = int(*dep.Spec.Replicas)
	}
	var out []*Consumer
	for i := range replicas {
		podName := fmt.Sprintf("%s-local-%d", dep.Name, i)
		env, err := ResolveEnv(ctx, k8s, dep.Namespace, podName, c)
		if err != nil {
			return out, err
		}
		// The image's entrypoint is the consumer binary; command (if any)
		// replaces it, args follow.
		args := append([]string{}, c.Args...)
		if len(c.Command) > 1 {
			args = append(append([]string{}, c.Command[1:]...), c.Args...)
		}
		p, err := StartConsumer(podName, proc.Options{LogDir: work, Stream: verbose, Env: env}, binary, args...)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ResolveEnv turns a container's env into KEY=VALUE pairs, resolving
// secretKeyRef, configMapKeyRef and the downward API fields a Pod would get.
func ResolveEnv(ctx context.Context, k8s client.Client, ns, podName string, c corev1.Container) ([]string, error) {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	values := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
			v = expandVars(v, values)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s := &corev1.Secret{}
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, s); err != nil {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, fmt.Errorf("env %s: Secret %s: %w", e.Name, ref.Name, err)
			}
			b, ok := s.Data[ref.Key]
			if !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, fmt.Errorf("env %s: Secret %s has no key %q", e.Name, ref.Name, ref.Key)
			}
			v = string(b)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := &corev1.ConfigMap{}
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, cm); err != nil {
				return nil, fmt.Errorf("env %s: ConfigMap %s: %w", e.Name, ref.Name, err)
			}
			v = cm.Data[ref.Key]
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = podName
			case "metadata.namespace":
				v = ns
			case "status.podIP":
				v = "127.0.0.1"
			default:
				v = ""
			}
		default:
			v = ""
		}
		values[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

// expandVars does the $(VAR) expansion Kubernetes applies to env values.
func expandVars(s string, values map[string]string) string {
	for k, v := range values {
		s = strings.ReplaceAll(s, "$("+k+")", v)
	}
	return s
}

// ReportLocalRollout waits until every local consumer answers /readyz, then
// writes the Deployment status a cluster would: all replicas updated, ready
// and available for the current generation. No kubelet or deployment
// controller runs here, so the demo plays their part.
func ReportLocalRollout(ctx context.Context, k8s client.Client, dep *appsv1.Deployment, consumers []*Consumer) error {
	deadline := time.Now().Add(60 * time.Second)
	for _, c := range consumers {
		for {
			if c.Exited() {
				return fmt.Errorf("consumer %s exited: %w\n%s", c.Name, c.ExitErr(), c.TailLog(30))
			}
			if ok, _ := HTTPOK(ctx, "http://"+c.Addr+"/readyz"); ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("consumer %s not ready within 60s:\n%s", c.Name, c.TailLog(30))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	cur := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), cur); err != nil {
		return err
	}
	n := int32(len(consumers)) //nolint:gosec // G115: a handful of test consumers
	cur.Status = appsv1.DeploymentStatus{
		ObservedGeneration: cur.Generation,
		Replicas:           n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
			Message: "local consumer processes", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
	}
	return k8s.Status().Update(ctx, cur)
}

func HTTPOK(ctx context.Context, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}
