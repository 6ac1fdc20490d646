package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

const demoNamespace = "demo"

// ledgerDDL is the business table the ledger sample's SQL sink writes to. It
// deliberately has no unique constraint on event_id: a double application
// would show up as two rows instead of being hidden by an error.
const ledgerDDL = `CREATE TABLE IF NOT EXISTS ledger (
	id         bigserial PRIMARY KEY,
	event_id   uuid NOT NULL,
	amount     bigint NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// Run starts the system, runs the workload, and returns the report. It stops
// everything it started before returning (after Ctrl-C when opts.Hold).
func Run(ctx context.Context, opts Options, progress io.Writer) (_ *Report, err error) {
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	started := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(progress, "demo [%5.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	var cl proc.Cleanup
	defer func() {
		step("stopping everything")
		cl.Run()
	}()

	root := opts.Root
	if root == "" {
		if root, err = proc.FindRoot(); err != nil {
			return nil, err
		}
	}
	removed, err := sweepStaleWorkDirs(os.TempDir())
	if len(removed) > 0 {
		step("removed what killed demos left behind: %s", strings.Join(removed, ", "))
	}
	if err != nil {
		step("could not remove everything killed demos left behind: %v", err)
	}
	work, restoreTmp, err := makeWorkDir()
	if err != nil {
		return nil, err
	}
	cl.Add(func() { restoreTmp(); _ = os.RemoveAll(work) })
	var verbose io.Writer
	if opts.Verbose {
		verbose = progress
	}

	step("building manager, consumer and devbroker")
	bin := filepath.Join(work, "bin")
	if err := proc.Build(ctx, root, bin, "./cmd/manager", "./cmd/consumer", "./cmd/devbroker"); err != nil {
		return nil, err
	}

	step("providing the envtest control plane (first run builds it: ~10 minutes)")
	assets, err := controlPlaneAssets(ctx, root, progress)
	if err != nil {
		return nil, err
	}

	step("starting PostgreSQL")
	pg, err := consumertest.StartPostgres()
	if err != nil {
		return nil, err
	}
	cl.Add(func() { _ = pg.Stop() })
	if err := execSQL(ctx, pg.URL("postgres"), "CREATE DATABASE demo"); err != nil {
		return nil, err
	}
	dbURL := pg.URL("demo")
	if err := execSQL(ctx, dbURL, ledgerDDL); err != nil {
		return nil, err
	}

	step("starting the Kafka-protocol broker")
	broker, err := proc.Start("devbroker", proc.Options{LogDir: work, Stream: verbose},
		filepath.Join(bin, "devbroker"), "-data-dir", filepath.Join(work, "broker"))
	if err != nil {
		return nil, err
	}
	cl.Add(func() { broker.Stop(5 * time.Second) })
	brokersCSV, err := broker.WaitForLine(ctx, "BROKERS ", 30*time.Second)
	if err != nil {
		return nil, err
	}
	brokers := strings.Split(brokersCSV, ",")

	step("starting kube-apiserver and etcd; installing CRDs from kustomize build config/crd")
	crds, err := renderCRDs(root)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	env, err := startControlPlane(assets, crds, kubeconfig)
	if err != nil {
		return nil, err
	}
	cl.Add(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	k8s, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}

	step("starting the operator")
	mgrEnv := append(os.Environ(), "KUBECONFIG="+kubeconfig)
	mgr, err := proc.Start("manager", proc.Options{LogDir: work, Stream: verbose, Env: mgrEnv}, filepath.Join(bin, "manager"),
		"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cl.Add(func() { mgr.Stop(10 * time.Second) })

	step("applying %s", opts.Sample)
	ic, err := applySample(ctx, k8s, filepath.Join(root, opts.Sample), brokers, dbURL)
	if err != nil {
		return nil, err
	}
	topic, _, _ := unstructured.NestedString(ic.Object, "spec", "kafka", "topic")
	group, _, _ := unstructured.NestedString(ic.Object, "spec", "kafka", "groupID")
	dlq, _, _ := unstructured.NestedString(ic.Object, "spec", "kafka", "deadLetterTopic")
	if dlq == "" {
		dlq = topic + ".dlq"
	}
	for _, t := range []struct {
		name string
		n    int
	}{{topic, opts.Partitions}, {dlq, 1}} {
		if err := consumertest.CreateTopic(ctx, brokers, t.name, t.n, nil); err != nil {
			return nil, err
		}
	}

	step("waiting for the operator to create the table, partitions and the consumer Deployment")
	dep, err := waitForDeployment(ctx, k8s, ic, mgr)
	if err != nil {
		return nil, err
	}

	replicas := int32(1)
	if dep.Spec.Replicas != nil {
		replicas = *dep.Spec.Replicas
	}
	step("starting %d consumer process(es) exactly as Deployment %s specifies", replicas, dep.Name)
	consumers, err := startConsumers(ctx, k8s, dep, filepath.Join(bin, "consumer"), work, verbose)
	if err != nil {
		return nil, err
	}
	cl.Add(func() {
		for _, c := range consumers {
			c.Stop(15 * time.Second)
		}
	})

	step("consumers ready; reporting them in the Deployment's status, as the kubelet and deployment controller would")
	if err := reportLocalRollout(ctx, k8s, dep, consumers); err != nil {
		return nil, err
	}

	step("producing events: duplicates, a replay, malformed events, events outside the window")
	w := consumertest.NewWriter(brokers, topic)
	wl, err := produceWorkload(ctx, w, opts.Unique, uint64(time.Now().UnixNano()), time.Now().UTC())
	_ = w.Close()
	if err != nil {
		return nil, err
	}
	step("produced %d messages (%d unique valid ids); waiting for the consumers to catch up", wl.Produced, wl.Unique)

	if err := waitForCatchUp(ctx, brokers, topic, group, opts.Partitions, consumers); err != nil {
		return nil, err
	}

	// The object should now be Ready: the table, partitions and consumers are.
	if err := waitForCondition(ctx, k8s, ic, "Ready", 30*time.Second); err != nil {
		step("warning: %v", err)
	}
	rep, err := buildReport(ctx, k8s, ic, wl, dbURL, brokers, dlq, consumers)
	if err != nil {
		return rep, err
	}
	// Log hygiene: the operator and the consumers handled the database URL
	// (with its password) all along; it must not appear in their logs.
	logs, _ := filepath.Glob(filepath.Join(work, "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return rep, err
		}
		rep.LogsChecked++
		if strings.Contains(string(b), pg.Password()) {
			rep.SecretLeaks = append(rep.SecretLeaks, filepath.Base(l))
		}
	}
	if opts.Hold {
		rep.Print(os.Stdout)
		step("holding; press Ctrl-C to stop (kubeconfig: %s)", kubeconfig)
		<-ctx.Done()
	}
	return rep, nil
}

func execSQL(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("running %q: %w", firstLine(sql), err)
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// applySample creates the demo namespace, the database Secret the sample
// refers to (holding the throwaway PostgreSQL's URL), and the sample object
// with its bootstrap servers pointed at the local broker.
func applySample(ctx context.Context, k8s client.Client, path string, brokers []string, dbURL string) (*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading sample: %w", err)
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}); err != nil {
		return nil, err
	}
	var ic *unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decoding sample: %w", err)
		}
		if u.Object == nil {
			continue
		}
		if u.GetKind() == "IdempotentConsumer" {
			ic = u
		}
	}
	if ic == nil {
		return nil, fmt.Errorf("%s holds no IdempotentConsumer", path)
	}
	ic.SetNamespace(demoNamespace)
	if err := unstructured.SetNestedStringSlice(ic.Object, brokers, "spec", "kafka", "bootstrapServers"); err != nil {
		return nil, err
	}
	secretName, _, _ := unstructured.NestedString(ic.Object, "spec", "database", "urlSecretRef", "name")
	secretKey, _, _ := unstructured.NestedString(ic.Object, "spec", "database", "urlSecretRef", "key")
	if secretName == "" || secretKey == "" {
		return nil, fmt.Errorf("sample has no spec.database.urlSecretRef name and key")
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: demoNamespace},
		StringData: map[string]string{secretKey: dbURL},
	}
	if err := k8s.Create(ctx, secret); err != nil {
		return nil, fmt.Errorf("creating Secret %s: %w", secretName, err)
	}
	if err := k8s.Create(ctx, ic); err != nil {
		return nil, fmt.Errorf("creating the IdempotentConsumer: %w", err)
	}
	return ic, nil
}

// waitForDeployment waits until the object is Ready... or at least until its
// table is ready and the Deployment exists (no Pods run here, so the
// Deployment never becomes available and ConsumerReady stays false).
func waitForDeployment(ctx context.Context, k8s client.Client, ic *unstructured.Unstructured, mgr *proc.Process) (*appsv1.Deployment, error) {
	deadline := time.Now().Add(2 * time.Minute)
	key := types.NamespacedName{Namespace: ic.GetNamespace(), Name: ic.GetName()}
	var lastConds string
	for time.Now().Before(deadline) {
		cur := ic.DeepCopy()
		if err := k8s.Get(ctx, key, cur); err == nil {
			lastConds = conditionSummary(cur)
			partitionsReady := conditionTrue(cur, "PartitionsReady")
			depName, _, _ := unstructured.NestedString(cur.Object, "status", "deploymentName")
			if depName == "" {
				depName = ic.GetName()
			}
			dep := &appsv1.Deployment{}
			if partitionsReady {
				if err := k8s.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: depName}, dep); err == nil {
					return dep, nil
				}
			}
		}
		if mgr.Exited() {
			return nil, fmt.Errorf("the operator exited: %w\n%s", mgr.ExitErr(), mgr.TailLog(30))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no Deployment and ready partitions within 2 minutes; conditions: %s\noperator log:\n%s", lastConds, mgr.TailLog(30))
}

func conditions(u *unstructured.Unstructured) []map[string]any {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []map[string]any
	for _, c := range raw {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	for _, c := range conditions(u) {
		if c["type"] == typ {
			return c["status"] == "True"
		}
	}
	return false
}

func conditionSummary(u *unstructured.Unstructured) string {
	var parts []string
	for _, c := range conditions(u) {
		parts = append(parts, fmt.Sprintf("%v=%v (%v)", c["type"], c["status"], c["reason"]))
	}
	return strings.Join(parts, ", ")
}

// startConsumers starts one local process per replica from the Deployment's
// first container: its command and args, and its env with Secret and field
// references resolved as the kubelet would. The only change is the listen
// address: Pods each have their own network namespace, local processes share
// one, so each replica gets its own port.
func startConsumers(ctx context.Context, k8s client.Client, dep *appsv1.Deployment, binary, work string, verbose io.Writer) ([]*consumerProc, error) {
	spec := dep.Spec.Template.Spec
	if len(spec.Containers) == 0 {
		return nil, fmt.Errorf("deployment %s has no containers", dep.Name)
	}
	c := spec.Containers[0]
	replicas := 1
	if dep.Spec.Replicas != nil {
		replicas = int(*dep.Spec.Replicas)
	}
	var out []*consumerProc
	for i := range replicas {
		podName := fmt.Sprintf("%s-local-%d", dep.Name, i)
		env, err := resolveEnv(ctx, k8s, dep.Namespace, podName, c)
		if err != nil {
			return out, err
		}
		port, err := consumertest.FreePort()
		if err != nil {
			return out, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		env = setEnv(env, envvars.ListenAddr, addr)
		// The image's entrypoint is the consumer binary; command (if any)
		// replaces it, args follow.
		args := append([]string{}, c.Args...)
		if len(c.Command) > 1 {
			args = append(append([]string{}, c.Command[1:]...), c.Args...)
		}
		p, err := proc.Start(podName, proc.Options{LogDir: work, Stream: verbose, Env: env}, binary, args...)
		if err != nil {
			return out, err
		}
		out = append(out, &consumerProc{Process: p, addr: addr})
	}
	return out, nil
}

type consumerProc struct {
	*proc.Process
	addr string
}

func setEnv(env []string, name, value string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// resolveEnv turns a container's env into KEY=VALUE pairs, resolving
// secretKeyRef, configMapKeyRef and the downward API fields a Pod would get.
func resolveEnv(ctx context.Context, k8s client.Client, ns, podName string, c corev1.Container) ([]string, error) {
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

// reportLocalRollout waits until every local consumer answers /readyz, then
// writes the Deployment status a cluster would: all replicas updated, ready
// and available for the current generation. No kubelet or deployment
// controller runs here, so the demo plays their part.
func reportLocalRollout(ctx context.Context, k8s client.Client, dep *appsv1.Deployment, consumers []*consumerProc) error {
	deadline := time.Now().Add(60 * time.Second)
	for _, c := range consumers {
		for {
			if c.Exited() {
				return fmt.Errorf("consumer %s exited: %w\n%s", c.Name, c.ExitErr(), c.TailLog(30))
			}
			if ok, _ := httpOK(ctx, "http://"+c.addr+"/readyz"); ok {
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
	n := int32(len(consumers))
	cur.Status = appsv1.DeploymentStatus{
		ObservedGeneration: cur.Generation,
		Replicas:           n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
			Message: "local consumer processes started by the demo", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
	}
	return k8s.Status().Update(ctx, cur)
}

func httpOK(ctx context.Context, url string) (bool, error) {
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

// waitForCondition waits until the object's condition is True.
func waitForCondition(ctx context.Context, k8s client.Client, ic *unstructured.Unstructured, typ string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	key := client.ObjectKeyFromObject(ic)
	last := ""
	for time.Now().Before(deadline) {
		cur := ic.DeepCopy()
		if err := k8s.Get(ctx, key, cur); err == nil {
			if conditionTrue(cur, typ) {
				return nil
			}
			last = conditionSummary(cur)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("condition %s not True within %s: %s", typ, timeout, last)
}

// waitForCatchUp waits until the group's committed offsets reach the end of
// every partition, i.e. consumer lag is zero.
func waitForCatchUp(ctx context.Context, brokers []string, topic, group string, partitions int, consumers []*consumerProc) error {
	deadline := time.Now().Add(5 * time.Minute)
	var lastLag int64 = -1
	for time.Now().Before(deadline) {
		lag, err := consumertest.GroupLag(ctx, brokers, group, topic, partitions)
		if err == nil && lag == 0 {
			return nil
		}
		if err == nil {
			lastLag = lag
		}
		for _, c := range consumers {
			if c.Exited() {
				return fmt.Errorf("consumer %s exited: %w\n%s", c.Name, c.ExitErr(), c.TailLog(30))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("consumers did not catch up within 5 minutes (lag %d)", lastLag)
}
