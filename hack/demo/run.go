package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
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

// ledgerRulesDDL are the ledger's business rules, which the demo's
// refused events break: an amount limit (dropped by the "fix" before the
// replay, fixLedgerDDL) and positive amounts (kept).
const (
	ledgerRulesDDL = `ALTER TABLE ledger ADD CONSTRAINT ledger_amount_positive CHECK (amount > 0),
	ADD CONSTRAINT ledger_amount_limit CHECK (amount <= 100000)`
	fixLedgerDDL = `ALTER TABLE ledger DROP CONSTRAINT ledger_amount_limit`
)

// system is one demo run: what it started, in order.
type system struct {
	opts    Options
	step    func(format string, args ...any)
	cl      *proc.Cleanup
	root    string
	work    string    // the run's directory (and TMPDIR): logs, binaries, data
	bin     string    // the built binaries
	verbose io.Writer // the processes' output, with -v

	pg      *consumertest.Postgres
	dbURL   string
	brokers []string

	kubeconfig string
	kubectl    string // the control plane's kubectl
	k8s        client.Client
	mgr        *proc.Process // the operator

	invoiceConsumers []*localstack.Consumer // the outbox hop's IdempotentConsumer's replicas
}

// Run starts the system, runs the workload, and returns the report. It stops
// everything it started before returning (after Ctrl-C when opts.Hold).
func Run(ctx context.Context, opts Options, progress io.Writer) (*Report, error) {
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	var cl proc.Cleanup
	s := &system{opts: opts, step: localstack.Steps(progress, "demo"), cl: &cl}
	defer func() {
		s.step("stopping everything")
		cl.Run()
	}()
	if opts.Verbose {
		s.verbose = progress
	}
	if err := s.build(ctx); err != nil {
		return nil, err
	}
	s.step("providing the envtest control plane (first run builds it: ~10 minutes)")
	assets, err := localstack.ControlPlaneAssets(ctx, s.root, progress)
	if err != nil {
		return nil, err
	}
	if err := s.startData(ctx); err != nil {
		return nil, err
	}
	if err := s.startOperator(assets); err != nil {
		return nil, err
	}
	return s.runSample(ctx)
}

// build removes what killed demos left behind, makes the work directory
// and builds the three commands into it.
func (s *system) build(ctx context.Context) error {
	root, err := localstack.Root(s.opts.Root)
	if err != nil {
		return err
	}
	s.root = root
	removed, err := sweepStaleWorkDirs(os.TempDir())
	if len(removed) > 0 {
		s.step("removed what killed demos left behind: %s", strings.Join(removed, ", "))
	}
	if err != nil {
		s.step("could not remove everything killed demos left behind: %v", err)
	}
	work, restoreTmp, err := makeWorkDir()
	if err != nil {
		return err
	}
	s.work = work
	s.cl.Add(func() { restoreTmp(); _ = os.RemoveAll(work) })

	s.step("building manager, consumer and devbroker")
	s.bin = filepath.Join(work, "bin")
	return proc.Build(ctx, root, s.bin, "./cmd/manager", "./cmd/consumer", "./cmd/devbroker")
}

// startData starts PostgreSQL (with the ledger) and the broker.
func (s *system) startData(ctx context.Context) error {
	s.step("starting PostgreSQL")
	var err error
	if s.pg, s.dbURL, err = localstack.StartPostgres(ctx, s.cl, "demo", []string{ledgerDDL, ledgerRulesDDL}); err != nil {
		return err
	}
	s.step("starting the Kafka-protocol broker")
	broker, err := localstack.StartBroker(ctx, s.cl, localstack.BrokerOptions{
		Name: "devbroker", Bin: filepath.Join(s.bin, "devbroker"), LogDir: s.work, Stream: s.verbose,
		Args: []string{"-data-dir", filepath.Join(s.work, "broker")},
	})
	if err != nil {
		return err
	}
	s.brokers = broker.Addrs()
	return nil
}

// startOperator starts kube-apiserver and etcd with the CRDs, and the
// operator process against them.
func (s *system) startOperator(assets string) error {
	s.step("starting kube-apiserver and etcd; installing CRDs from kustomize build config/crd")
	crds, err := localstack.RenderCRDs(s.root)
	if err != nil {
		return err
	}
	s.kubeconfig = filepath.Join(s.work, "kubeconfig")
	s.kubectl = filepath.Join(assets, "kubectl")
	env, err := localstack.StartControlPlane(assets, crds, s.kubeconfig)
	if err != nil {
		return err
	}
	s.cl.Add(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	if s.k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}

	s.step("starting the operator")
	mgrEnv := append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	s.mgr, err = proc.Start("manager", proc.Options{LogDir: s.work, Stream: s.verbose, Env: mgrEnv}, filepath.Join(s.bin, "manager"),
		"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0")
	if err != nil {
		return err
	}
	mgr := s.mgr
	s.cl.Add(func() { mgr.Stop(10 * time.Second) })
	return nil
}

// runSample applies the sample, starts the consumers its Deployment
// specifies, produces the workload, waits for the consumers to catch up, and
// reports.
func (s *system) runSample(ctx context.Context) (*Report, error) {
	opts := s.opts
	s.step("applying %s", opts.Sample)
	ic, err := applySample(ctx, s.k8s, filepath.Join(s.root, opts.Sample), s.brokers, s.dbURL)
	if err != nil {
		return nil, err
	}
	topic, group, dlq, err := s.createTopics(ctx, ic)
	if err != nil {
		return nil, err
	}
	consumers, err := s.startConsumers(ctx, ic)
	if err != nil {
		return nil, err
	}

	s.step("producing events: duplicates, a replay, malformed events, events outside the window")
	w := consumertest.NewWriter(s.brokers, topic)
	wl, err := produceWorkload(ctx, w, opts.Unique, uint64(time.Now().UnixNano()), time.Now().UTC())
	_ = w.Close()
	if err != nil {
		return nil, err
	}
	s.step("produced %d messages (%d unique valid ids); waiting for the consumers to catch up", wl.Produced, wl.Unique)
	exited := func() *proc.Process { return firstExited(consumers) }
	if err := localstack.WaitForLagZero(ctx, s.brokers, group, topic, opts.Partitions, 5*time.Minute, exited); err != nil {
		return nil, err
	}

	// The object should now be Ready: the table, partitions and consumers are.
	if err := waitForCondition(ctx, s.k8s, ic, "Ready", 30*time.Second); err != nil {
		s.step("warning: %v", err)
	}
	rep, err := buildReport(ctx, s.k8s, ic, wl, s.dbURL, s.brokers, dlq, consumers)
	if err != nil {
		return rep, err
	}
	// The dead-letter round trip, the consumers still running.
	if rep.Replay, err = s.runReplay(ctx, ic, rep, dlq); err != nil {
		return rep, err
	}
	// The outbox hop: orders and their events in one transaction, the
	// relay, and a second IdempotentConsumer applying each once.
	if rep.Outbox, err = s.runOutbox(ctx, ic, opts.Orders); err != nil {
		return rep, err
	}
	// Log hygiene: the operator, the consumers and the relays handled the database URL
	// (with its password) all along; it must not appear in their logs.
	leaks, err := localstack.SecretInLogs(s.work, s.pg.Password())
	if err != nil {
		return rep, err
	}
	rep.LogsChecked, rep.SecretLeaks = leaks.Checked, leaks.Files
	if opts.Hold {
		rep.Print(os.Stdout)
		s.hold(ctx, append(consumers, s.invoiceConsumers...))
	}
	return rep, nil
}

// createTopics creates the object's topic (with the demo's partitions) and
// its dead-letter topic, and returns their names and the consumer group.
func (s *system) createTopics(ctx context.Context, ic *unstructured.Unstructured) (topic, group, dlq string, err error) {
	topic, _, _ = unstructured.NestedString(ic.Object, "spec", "kafka", "topic")
	group, _, _ = unstructured.NestedString(ic.Object, "spec", "kafka", "groupID")
	dlq, _, _ = unstructured.NestedString(ic.Object, "spec", "kafka", "deadLetterTopic")
	if dlq == "" {
		dlq = topic + ".dlq"
	}
	for _, t := range []struct {
		name string
		n    int
	}{{topic, s.opts.Partitions}, {dlq, 1}} {
		if err := consumertest.CreateTopic(ctx, s.brokers, t.name, t.n, nil); err != nil {
			return "", "", "", err
		}
	}
	return topic, group, dlq, nil
}

// startConsumers waits for the operator's Deployment, starts its replicas as
// local processes, and reports them ready in its status.
func (s *system) startConsumers(ctx context.Context, ic *unstructured.Unstructured) ([]*localstack.Consumer, error) {
	s.step("waiting for the operator to create the table, partitions and the consumer Deployment")
	dep, err := waitForDeployment(ctx, s.k8s, ic, s.mgr)
	if err != nil {
		return nil, err
	}
	replicas := int32(1)
	if dep.Spec.Replicas != nil {
		replicas = *dep.Spec.Replicas
	}
	s.step("starting %d consumer process(es) exactly as Deployment %s specifies", replicas, dep.Name)
	consumers, err := localstack.StartReplicas(ctx, s.k8s, dep, filepath.Join(s.bin, "consumer"), s.work, s.verbose)
	s.cl.Add(func() {
		for _, c := range consumers {
			c.Stop(15 * time.Second)
		}
	})
	if err != nil {
		return nil, err
	}
	s.step("consumers ready; reporting them in the Deployment's status, as the kubelet and deployment controller would")
	if err := localstack.ReportLocalRollout(ctx, s.k8s, dep, consumers); err != nil {
		return nil, err
	}
	return consumers, nil
}

// hold keeps everything running until ctx ends (Ctrl-C), with a local
// kubelet for the consumer Deployments of objects added by hand, and says
// how to reach each part.
func (s *system) hold(ctx context.Context, sample []*localstack.Consumer) {
	sampleDeps := map[types.NamespacedName]bool{}
	for _, c := range sample {
		// Local replicas are named <deployment>-local-<n>.
		if i := strings.LastIndex(c.Name, "-local-"); i > 0 {
			sampleDeps[types.NamespacedName{Namespace: demoNamespace, Name: c.Name[:i]}] = true
		}
	}
	k := &localstack.Kubelet{
		K8s: s.k8s, Binary: filepath.Join(s.bin, "consumer"), Work: s.work, Verbose: s.verbose, Log: s.step,
		Skip: func(key types.NamespacedName) bool { return sampleDeps[key] },
	}
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx) }()
	s.step("holding; press Ctrl-C to stop. Everything is local and throwaway:\n"+
		"  kubectl:    %s --kubeconfig %s\n"+
		"  PostgreSQL: %s\n"+
		"  Kafka:      %s (create a topic and its .dlq for an object you add: this broker creates none; until both exist the object is Ready=False, TopicNotFound or DeadLetterTopicNotFound)\n"+
		"  An IdempotentConsumer you apply gets its table, partitions and consumer Deployment from the operator;\n"+
		"  the demo runs that Deployment's replicas as local processes (logs in %s), as a kubelet would.",
		s.kubectl, s.kubeconfig, s.dbURL, strings.Join(s.brokers, ","), s.work)
	<-ctx.Done()
	<-done
}
