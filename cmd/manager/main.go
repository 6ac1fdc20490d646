/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command manager runs the idempotency operator: the IdempotentConsumer and
// DeadLetterReplay controllers, with leader election, health and readiness probes, and an
// authenticated, authorized HTTPS metrics endpoint.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/version"
	"github.com/idempotency-dev/operator/controllers"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// config is what the command line asks for.
type config struct {
	metricsAddr, probeAddr, metricsCertDir  string
	secureMetrics, enableHTTP2, leaderElect bool
	printVersion                            bool
	leaderElectionNamespace                 string
	opts                                    controllers.Options
	pool                                    controllers.PoolOptions
	watchNamespaces                         []string
	// consumerImageSet: --consumer-image was given.
	consumerImageSet bool
	zap              zap.Options
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	build := version.Get()
	if cfg.printVersion {
		fmt.Println(build)
		return
	}

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&cfg.zap)))
	setupLog := ctrl.Log.WithName("setup")
	if !cfg.consumerImageSet && !build.IsRelease() {
		// Only release tags are published: say so rather than fail, so that
		// objects with spec.consumer.image set (and the local demo) still work.
		setupLog.Info("WARNING: this is not a release build, so the default consumer image is probably not published; "+
			"pass --consumer-image or set spec.consumer.image", "version", build.Version, "consumerImage", cfg.opts.ConsumerImage)
	}
	metrics.Registry.MustRegister(version.NewCollector("idempotency_operator"))
	// A soft memory limit at 90% of the container's (cgroup) limit: near it
	// the Go runtime collects sooner instead of letting the heap double,
	// so a large cluster's burst of reconciles is not OOM-killed. GOMEMLIMIT
	// set in the environment wins; AUTOMEMLIMIT=off turns this off.
	if limit, err := memlimit.Set(memlimit.WithProvider(memlimit.FromCgroup)); err != nil {
		setupLog.Info("No soft memory limit from the container's limit", "reason", err.Error())
	} else if limit != math.MaxInt64 {
		setupLog.Info("Soft memory limit (GOMEMLIMIT)", "bytes", limit)
	}

	mgr, err := newManager(cfg)
	if err != nil {
		setupLog.Error(err, "Creating the manager")
		os.Exit(1)
	}

	stores := controllers.NewPoolCache(cfg.pool)
	defer stores.Close()
	if err := (&controllers.IdempotentConsumerReconciler{
		Stores:   stores,
		Recorder: mgr.GetEventRecorder("idempotency-operator"),
		Options:  cfg.opts,
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Setting up the controller")
		os.Exit(1)
	}
	if err := (&controllers.DeadLetterReplayReconciler{
		Recorder:      mgr.GetEventRecorder("idempotency-operator"),
		ConsumerImage: cfg.opts.ConsumerImage,
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Setting up the DeadLetterReplay controller")
		os.Exit(1)
	}
	if err := (&controllers.OutboxReconciler{
		Pools:    stores,
		Recorder: mgr.GetEventRecorder("idempotency-operator"),
		Options:  cfg.opts,
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Setting up the Outbox controller")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "Adding the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "Adding the readiness check")
		os.Exit(1)
	}

	setupLog.Info("Starting the manager", "version", build.Version, "revision", build.Revision, "consumerImage", cfg.opts.ConsumerImage, "leaderElect", cfg.leaderElect, "watchNamespaces", cfg.watchNamespaces)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "Running the manager")
		os.Exit(1)
	}
}

// parseFlags parses the command line into a config. An invalid value is an
// error (exit status 2); with --version nothing else is checked.
func parseFlags() (*config, error) {
	cfg := &config{zap: zap.Options{Development: false}}
	opts := &cfg.opts
	flag.StringVar(&cfg.metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint (HTTPS unless --metrics-secure=false); \"0\" disables it.")
	flag.BoolVar(&cfg.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, to clients the API server authenticates and authorizes (get on /metrics).")
	flag.StringVar(&cfg.metricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint; empty means a self-signed certificate.")
	flag.BoolVar(&cfg.enableHTTP2, "enable-http2", false, "Allow HTTP/2 on the metrics endpoint (off: HTTP/2 Rapid Reset and Stream Cancellation CVEs).")
	flag.StringVar(&cfg.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.BoolVar(&cfg.leaderElect, "leader-elect", false, "Elect a leader, so only one replica reconciles at a time.")
	flag.StringVar(&cfg.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; empty means the pod's namespace.")
	flag.BoolVar(&cfg.printVersion, "version", false, "Print the version and exit.")
	flag.StringVar(&opts.ConsumerImage, "consumer-image", objects.DefaultConsumerImage,
		"Consumer image used when spec.consumer.image is empty; the default is the consumer released with this operator.")
	flag.DurationVar(&opts.MaintenanceLead, "maintenance-lead", 5*time.Minute, "How long before a partition boundary maintenance runs.")
	flag.DurationVar(&opts.MaxRequeue, "max-requeue", 24*time.Hour, "Longest wait between two reconciles of one object.")
	flag.DurationVar(&opts.RetryBase, "retry-base", 5*time.Second, "First wait after a failure that retrying can fix.")
	flag.DurationVar(&opts.RetryMax, "retry-max", 5*time.Minute, "Longest wait after repeated failures.")
	flag.DurationVar(&opts.DatabaseTimeout, "database-timeout", time.Minute, "Bound on the database work of one reconcile.")
	flag.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", controllers.DefaultMaxConcurrentReconciles, "Objects reconciled in parallel.")
	flag.DurationVar(&opts.TopicRefresh, "topic-refresh", 5*time.Minute, "How long topic retention and partitions read from the brokers (and a missing KEDA) are trusted before the next reconcile asks again.")
	flag.DurationVar(&opts.KafkaTimeout, "kafka-timeout", 10*time.Second, "Bound on one look at the brokers.")
	flag.DurationVar(&opts.TopicCheckInterval, "topic-check-interval", time.Hour, "How often topic retention and partitions are checked again after a successful look (a look that fails or finds a topic missing is retried after 2s, doubling up to 20s); 0 disables the periodic check.")
	flag.StringVar(&opts.MaxConcurrentTemplateUpgrades, "max-concurrent-template-upgrades", controllers.DefaultMaxConcurrentTemplateUpgrades,
		"Consumer Deployments that roll out a pod template change this operator made (a new release, a new --consumer-image), not their spec, at once: a count or a percentage of them; 0 applies such changes only with the next spec change.")
	flag.StringVar(&opts.ConfigHashKeyNamespace, "config-hash-key-namespace", "",
		"Namespace of the Secret "+controllers.DefaultConfigHashKeySecret+" holding the key of the consumer pod templates' config hash (made once by the manager when absent); empty means POD_NAMESPACE, else the Pod's own namespace, else \"default\" (outside a cluster).")
	var maxConns int
	var watchNamespacesFlag, hostAllowlistFlag string
	flag.StringVar(&hostAllowlistFlag, "database-host-allowlist", "", "Comma-separated database hosts the operator may connect to: host names, *.domain, IP addresses, CIDRs (names match names, addresses match addresses; nothing is resolved to decide). A database URL naming another host is refused with DatabaseHostNotAllowed, without dialing. Empty allows every host.")
	flag.StringVar(&watchNamespacesFlag, "watch-namespaces", "", "Comma-separated namespaces whose IdempotentConsumers (and Secrets, Deployments) the manager watches; empty means the whole cluster. Pair a list with the RBAC of config/namespaced.")
	flag.IntVar(&maxConns, "database-max-conns", controllers.DefaultDatabaseMaxConns, "Connections per distinct database URL: the most the operator opens against one database, whatever --max-concurrent-reconciles is.")
	cfg.zap.BindFlags(flag.CommandLine)
	flag.Parse()
	if cfg.printVersion {
		return cfg, nil
	}
	if maxConns < 1 || maxConns > math.MaxInt32 {
		return nil, fmt.Errorf("--database-max-conns=%d: must be from 1 to %d", maxConns, math.MaxInt32)
	}
	cfg.pool.MaxConns = int32(maxConns)
	var err error
	if cfg.watchNamespaces, err = controllers.ParseWatchNamespaces(watchNamespacesFlag); err != nil {
		return nil, err
	}
	if opts.DatabaseHostAllowlist, err = controllers.ParseHostAllowlist(hostAllowlistFlag); err != nil {
		return nil, fmt.Errorf("invalid --database-host-allowlist: %w", err)
	}
	if opts.TopicCheckInterval > 0 && opts.TopicCheckInterval < time.Minute {
		return nil, fmt.Errorf("invalid --topic-check-interval %s: want 0 (off) or at least 1m (every object asks the brokers at that rate)", opts.TopicCheckInterval)
	}
	if _, err := controllers.ParseMaxConcurrentTemplateUpgrades(opts.MaxConcurrentTemplateUpgrades); err != nil {
		return nil, fmt.Errorf("invalid --max-concurrent-template-upgrades: %w", err)
	}
	if opts.TopicCheckInterval == 0 {
		opts.TopicCheckInterval = -1 // 0 in controllers.Options means the default
	}
	flag.Visit(func(f *flag.Flag) { cfg.consumerImageSet = cfg.consumerImageSet || f.Name == "consumer-image" })
	return cfg, nil
}

// newManager creates the controller manager: scheme, metrics endpoint,
// probes, leader election and the cache and client options of the
// controllers package.
func newManager(cfg *config) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kafkav1alpha1.AddToScheme(scheme))

	var tlsOpts []func(*tls.Config)
	if !cfg.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress:   cfg.metricsAddr,
		SecureServing: cfg.secureMetrics,
		CertDir:       cfg.metricsCertDir,
		TLSOpts:       tlsOpts,
	}
	if cfg.secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	return ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  cfg.probeAddr,
		LeaderElection:          cfg.leaderElect,
		LeaderElectionID:        "idempotency-operator.kafka.idempotency.dev",
		LeaderElectionNamespace: cfg.leaderElectionNamespace,
		// The new leader starts at once when the old one exits cleanly.
		LeaderElectionReleaseOnCancel: true,
		// Only our Deployments are cached; Secrets are watched as metadata
		// and read on demand, never cached whole; with --watch-namespaces
		// every watch stays inside those namespaces.
		Cache:  controllers.CacheOptions(cfg.watchNamespaces),
		Client: controllers.ClientOptions(),
	})
}
