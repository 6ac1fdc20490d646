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
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/replay"
	"github.com/idempotency-dev/operator/consumer/sink"
	"github.com/idempotency-dev/operator/consumer/version"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailed  = 1 // Run returned an error (a Stop policy, a fatal setup error)
	ExitConfig  = 2 // the configuration is invalid
	ExitStopped = 3 // stopped by a Stop policy
)

// Main runs the consumer binary and returns its exit code.
func Main(args []string, getenv func(string) string, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == replay.Subcommand || args[0] == replay.ListSubcommand) {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if args[0] == replay.Subcommand {
			return runReplay(ctx, args[1:], getenv, stderr)
		}
		return runDeadLetters(ctx, args[1:], getenv, os.Stdout, stderr)
	}
	if len(args) > 0 && args[0] == OutboxSubcommand {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return runOutboxRelay(ctx, args[1:], getenv, stderr)
	}
	opts, err := Parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "consumer: invalid configuration:\n  %s\n", strings.ReplaceAll(redact(err.Error(), opts.Secrets), "\n", "\n  "))
		return ExitConfig
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return run(ctx, opts, stderr)
}

func run(ctx context.Context, opts Options, stderr io.Writer) int {
	var h slog.Handler
	hopts := &slog.HandlerOptions{Level: opts.LogLevel}
	if opts.LogFormat == "text" {
		h = slog.NewTextHandler(stderr, hopts)
	} else {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	log := slog.New(consumer.RedactingHandler(h, opts.Secrets...))
	opts.Consumer.Logger = log
	resolveMemoryLimit(&opts, hostCgroup, log)
	applyMemoryLimit(opts, log)

	handler, external, err := buildSink(ctx, opts, log)
	if err != nil {
		log.Error("invalid sink configuration", "err", err)
		return ExitConfig
	}
	if opts.Consumer.Registerer == nil {
		// The runtime's metrics plus which build this is.
		reg := prometheus.NewRegistry()
		reg.MustRegister(version.NewCollector(consumer.MetricsNamespace))
		opts.Consumer.Registerer, opts.Consumer.Gatherer = reg, reg
	}
	stopTracing, err := startTracing(ctx, &opts, log)
	if err != nil {
		log.Error("invalid tracing configuration", "err", err)
		return ExitConfig
	}
	defer stopTracing()
	var c *consumer.Consumer
	if external != nil {
		c, err = consumer.NewExternal(opts.Consumer, external)
	} else {
		c, err = consumer.New(opts.Consumer, handler)
	}
	if err != nil {
		log.Error("invalid configuration", "err", configError(err))
		return ExitConfig
	}
	go followMemoryLimit(ctx, opts, hostCgroup, log, c.SetMemoryBudget)
	// The runtime redacts its errors and dead-letter headers with its own
	// list, which knows only the database and SASL passwords.
	if err := c.AddSecrets(opts.Secrets...); err != nil {
		log.Error("registering secrets", "err", err)
		return ExitFailed
	}

	var srv *http.Server
	if opts.ListenAddr != "" {
		ln, err := net.Listen("tcp", opts.ListenAddr)
		if err != nil {
			log.Error("listening for probes and metrics", "addr", opts.ListenAddr, "err", err)
			return ExitFailed
		}
		srv = &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("probe and metrics server failed", "err", err)
			}
		}()
		log.Info("serving /healthz /readyz /metrics", "addr", ln.Addr().String())
	}
	runErr := c.Run(ctx)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	switch {
	case runErr == nil:
		return ExitOK
	case errors.Is(runErr, consumer.ErrStopped):
		log.Error("stopped by policy", "err", runErr)
		return ExitStopped
	default:
		log.Error("consumer failed", "err", runErr)
		return ExitFailed
	}
}

// applyMemoryLimit sets the Go runtime's soft memory limit from the
// container's, so that the garbage collector works harder before the kernel
// kills the process, unless GOMEMLIMIT says otherwise.
func applyMemoryLimit(opts Options, log *slog.Logger) {
	if opts.MemoryLimit <= 0 {
		return
	}
	if opts.GoMemLimitSet {
		log.Info("memory limit", "containerLimit", opts.MemoryLimit, "goMemLimit", "from GOMEMLIMIT", "recordBudget", opts.Consumer.MemoryBudget)
		return
	}
	limit := percentOf(opts.MemoryLimit, GoMemLimitPercent)
	debug.SetMemoryLimit(limit)
	log.Info("memory limit", "containerLimit", opts.MemoryLimit, "goMemLimit", limit, "recordBudget", opts.Consumer.MemoryBudget)
}

// buildSink returns the sink as a transactional handler (sql, log, none:
// their effects, if any, are in the dedup transaction or nowhere) or as an
// external one (http: never called with a transaction open).
func buildSink(ctx context.Context, opts Options, log *slog.Logger) (consumer.Handler, consumer.ExternalHandler, error) {
	switch opts.Sink {
	case "http":
		h, err := sink.HTTPExternal(opts.HTTP)
		return nil, h, err
	case "sql":
		h, err := sink.SQL(opts.SQL)
		if err != nil {
			return nil, nil, err
		}
		checkStatement(ctx, opts, log)
		return h, nil, nil
	case "log":
		return sink.Log(log), nil, nil
	case "none":
		return sink.None(), nil, nil
	}
	return nil, nil, fmt.Errorf("unknown sink %q", opts.Sink)
}

// checkStatement prepares the SQL sink's statement once, so that a typo or a
// missing table shows at start-up rather than on the first event. A database
// that can't be reached is not an error here: the runtime waits for it.
func checkStatement(ctx context.Context, opts Options, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, opts.Consumer.DatabaseURL)
	if err != nil {
		log.Warn("could not check the SQL statement: database unreachable", "err", err)
		return
	}
	defer conn.Close(context.Background())
	if err := opts.SQL.Check(ctx, conn); err != nil {
		log.Error("the SQL sink's statement does not prepare; events will wait until it does", "err", err)
	}
}

func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= 3 {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	return s
}

// startTracing sets opts.Consumer.TracerProvider from the OTLP settings
// when tracing is on and no provider is set; stop flushes and ends it.
func startTracing(ctx context.Context, opts *Options, log *slog.Logger) (stop func(), err error) {
	if !opts.Tracing || opts.Consumer.TracerProvider != nil {
		return func() {}, nil
	}
	tp, err := newTracerProvider(ctx, opts.Getenv, opts.Consumer.Group)
	if err != nil {
		return nil, err
	}
	opts.Consumer.TracerProvider = tp
	log.Info("exporting spans over OTLP")
	return func() { shutdownTracing(tp, log) }, nil
}
