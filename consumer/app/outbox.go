package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/idempotency-dev/operator/consumer/version"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OutboxSubcommand runs the outbox relay: `consumer outbox-relay`.
const OutboxSubcommand = "outbox-relay"

// outboxMaintainEvery is how often a relay with an owner keeps the outbox's
// partitions (every replica tries; the table's maintenance lock serialises
// them).
const outboxMaintainEvery = 10 * time.Minute

// runOutboxRelay configures the relay from flags and CONSUMER_* variables
// (flags win) and runs it until ctx ends.
func runOutboxRelay(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("consumer "+OutboxSubcommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	str := func(name, def, usage string) *string {
		return fs.String(FlagName(name), env(name, def), usage+" [$"+name+"]")
	}
	brokers := str(envvars.Brokers, "", "comma-separated Kafka bootstrap brokers (required)")
	// No default shown for the URL: -h must not print a secret.
	dbURL := fs.String(FlagName(envvars.DatabaseURL), "", "PostgreSQL URL or DSN (required; $"+envvars.DatabaseURLFallback+" when unset) [$"+envvars.DatabaseURL+"]")
	listen := str(envvars.ListenAddr, ":8080", "address of /healthz and /metrics (empty: none)")
	schema := str(envvars.OutboxSchema, dedup.DefaultSchema, "the outbox table's schema")
	table := str(envvars.OutboxTable, outbox.DefaultTableName, "the outbox table")
	owner := str(envvars.OutboxOwner, "", "if set, create the outbox (marked with this owner) and keep its partitions")
	interval := str(envvars.OutboxInterval, string(dedup.DefaultInterval), "partition interval when creating the table: Hourly, Daily, Weekly or Monthly")
	premake := str(envvars.OutboxPremake, "4", "partitions kept made ahead (with an owner)")
	retention := str(envvars.OutboxRetention, "168h", "a published partition is dropped this long after its range ends (with an owner)")
	poll := str(envvars.OutboxPollInterval, outbox.DefaultPollInterval.String(), "how often to look for rows without a notification")
	batch := str(envvars.OutboxBatchSize, fmt.Sprint(outbox.DefaultBatchSize), "rows per publish")
	maxBytes := str(envvars.OutboxMaxMessageBytes, fmt.Sprint(outbox.DefaultMaxMessageBytes), "largest record sent; at most the broker's message.max.bytes")
	timeout := str(envvars.OutboxPublishTimeout, outbox.DefaultPublishTimeout.String(), "bound of one publish call; a new owner waits twice this before publishing")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: consumer outbox-relay [flags]\n\nPublishes the committed rows of a transactional outbox to Kafka (docs/outbox.md). Run several replicas: one owns the stream.\nKafka TLS and SASL: the consumer's $CONSUMER_TLS_* and $CONSUMER_SASL_* variables.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitConfig
	}
	if *dbURL == "" {
		*dbURL = env(envvars.DatabaseURL, getenv(envvars.DatabaseURLFallback))
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "consumer %s: invalid configuration: %s\n", OutboxSubcommand, redact(fmt.Sprintf(format, a...), []string{*dbURL, getenv(envvars.SASLPassword)}))
		return ExitConfig
	}
	var cfg outbox.Config
	var err error
	cfg.Table = outbox.Table{Schema: *schema, Name: *table, Interval: dedup.Interval(*interval)}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	if *dbURL == "" {
		return fail("%s is required", envvars.DatabaseURL)
	}
	if cfg.ConnConfig, err = pgx.ParseConfig(*dbURL); err != nil {
		return fail("%s: cannot be parsed", envvars.DatabaseURL) // the error may quote the URL
	}
	durations := []struct {
		name, v string
		dst     *time.Duration
	}{{envvars.OutboxPollInterval, *poll, &cfg.PollInterval}, {envvars.OutboxPublishTimeout, *timeout, &cfg.PublishTimeout}}
	var keep time.Duration
	durations = append(durations, struct {
		name, v string
		dst     *time.Duration
	}{envvars.OutboxRetention, *retention, &keep})
	for _, d := range durations {
		if *d.dst, err = time.ParseDuration(d.v); err != nil || *d.dst <= 0 {
			return fail("%s: %q is not a positive duration", d.name, d.v)
		}
	}
	ints := []struct {
		name, v string
		dst     *int
	}{{envvars.OutboxBatchSize, *batch, &cfg.BatchSize}, {envvars.OutboxMaxMessageBytes, *maxBytes, &cfg.MaxMessageBytes}}
	var ahead int
	ints = append(ints, struct {
		name, v string
		dst     *int
	}{envvars.OutboxPremake, *premake, &ahead})
	for _, n := range ints {
		if _, err := fmt.Sscan(n.v, n.dst); err != nil || *n.dst <= 0 {
			return fail("%s: %q is not a positive number", n.name, n.v)
		}
	}
	// Kafka TLS and SASL: the consumer's own variables, read the same way.
	v := &values{m: map[string]string{}}
	for _, name := range []string{envvars.TLSEnabled, envvars.TLSCAFile, envvars.TLSCertFile, envvars.TLSKeyFile,
		envvars.TLSInsecureSkipVerify, envvars.SASLMechanism, envvars.SASLUsername, envvars.SASLPassword} {
		v.m[name] = getenv(name)
	}
	for _, name := range []string{envvars.TLSEnabled, envvars.TLSInsecureSkipVerify} {
		if v.m[name] == "" {
			v.m[name] = "false"
		}
	}
	tlsCfg, err := buildTLS(v)
	if err == nil {
		err = errors.Join(v.errs...)
	}
	if err != nil {
		return fail("%v", err)
	}
	clients, err := broker.NewClients(broker.Config{Brokers: cfg.Brokers, ClientID: "idempotent-outbox-relay", TLS: tlsCfg,
		Mechanism: strings.ToUpper(v.str(envvars.SASLMechanism)), Username: v.str(envvars.SASLUsername), Password: v.m[envvars.SASLPassword]})
	if err != nil {
		return fail("%s: %v", envvars.SASLMechanism, err)
	}
	cfg.Transport = clients.Transport
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("component", "outbox-relay")
	cfg.Logger = log
	reg := prometheus.NewRegistry()
	reg.MustRegister(version.NewCollector("idempotent_consumer"))
	if cfg.Metrics, err = outbox.NewMetrics(reg); err != nil {
		return fail("%v", err)
	}
	relay, err := outbox.NewRelay(cfg)
	if err != nil {
		return fail("%v", err)
	}
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Error("listening for probes and metrics", "addr", *listen, "err", err)
			return ExitFailed
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		// Unhealthy while the owner is stalled (outbox.Config.StallTimeout:
		// rows to publish and no acknowledgement for 6 publish timeouts, the
		// broker failing): the restart gives the stream to a standby.
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if err := relay.Health(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
	}
	if *owner != "" {
		pool, err := pgxpool.New(ctx, *dbURL)
		if err != nil {
			return fail("%s: cannot be parsed", envvars.DatabaseURL)
		}
		defer pool.Close()
		var pending *outbox.TopicCheckPendingError
		if err := outbox.Ensure(ctx, pool, cfg.Table, *owner, outbox.WithMaxMessageBytes(cfg.MaxMessageBytes)); errors.As(err, &pending) {
			log.Warn("the outbox is ready; its topic check waits for a moment without inserts, at the next start", "err", err)
		} else if err != nil {
			log.Error("creating the outbox", "err", err)
			return ExitFailed
		}
		maintain := func() {
			if _, err := outbox.Maintain(ctx, pool, cfg.Table, time.Now(), ahead, keep); err != nil {
				log.Error("keeping the outbox's partitions", "err", err)
			}
		}
		maintain()
		go func() {
			t := time.NewTicker(outboxMaintainEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					maintain()
				}
			}
		}()
	}
	log.Info("outbox relay starting", "outbox", cfg.Table.String(), "brokers", cfg.Brokers)
	if err := relay.Run(ctx); err != nil {
		log.Error("outbox relay stopped", "err", err)
		return ExitFailed
	}
	return ExitOK
}
