// Command dedup-migrate converts an existing, unpartitioned processed-event
// table into the partitioned table the operator manages, without losing a
// dedup record inside the window (package consumer/dedup/migrate; the
// procedure is in docs/migration.md):
//
//	export DATABASE_URL=postgres://...
//	dedup-migrate --owner "$(kubectl get ic orders -o jsonpath='{.metadata.uid}')" \
//	    --group orders-writer --retention 168h --dry-run
//
// Run it again without --dry-run to migrate; running it once more is a
// no-op. Exit codes: 0 done, 1 failed, 2 invalid arguments.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/dedup/migrate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Main runs the command with args and the environment; it returns the exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dedup-migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg           migrate.Config
		url           string
		scope         string
		interval      string
		skippedCSV    string
		removeTrigger bool
		verbose       bool
	)
	fs.StringVar(&url, "database-url", "", "PostgreSQL URL (default $DATABASE_URL; prefer the environment: flags show in the process list)")
	fs.StringVar(&cfg.Table.Schema, "schema", dedup.DefaultSchema, "schema of the partitioned table (spec.database.schema)")
	fs.StringVar(&cfg.Table.Name, "table", dedup.DefaultTableName, "the partitioned table (spec.database.table)")
	fs.StringVar(&scope, "scope", string(dedup.DefaultScope), "ConsumerGroup or Global (spec.dedup.scope)")
	fs.StringVar(&interval, "interval", string(dedup.DefaultInterval), "Hourly, Daily, Weekly or Monthly (spec.dedup.interval)")
	fs.DurationVar(&cfg.Retention, "retention", migrate.DefaultRetention, "spec.dedup.retention: the window copied")
	fs.IntVar(&cfg.Premake, "premake", migrate.DefaultPremake, "spec.dedup.premake")
	fs.StringVar(&cfg.Owner, "owner", "", "the IdempotentConsumer's metadata.uid; needed when the table does not exist yet")
	fs.StringVar(&cfg.LegacySchema, "legacy-schema", "", "schema of the legacy table (default --schema)")
	fs.StringVar(&cfg.Legacy, "legacy-table", "", "the legacy table (default --table: it is renamed out of the way)")
	fs.StringVar(&cfg.RenameTo, "rename-to", "", "new name of a legacy table that has --table's name (default <table>_legacy)")
	fs.StringVar(&cfg.IDColumn, "id-column", migrate.DefaultIDColumn, "legacy column holding the event id (uuid)")
	fs.StringVar(&cfg.GroupColumn, "group-column", "", "legacy column holding the consumer group (default consumer_group if present; - for none: every row gets --group)")
	fs.StringVar(&cfg.ProcessedAtColumn, "processed-at-column", "", "legacy column holding the processing time (default processed_at if present; - for none: the copy time)")
	fs.StringVar(&cfg.Group, "group", "", "consumer group of legacy rows without one (spec.kafka.groupID); required without a group column")
	fs.IntVar(&cfg.BatchSize, "batch-size", migrate.DefaultBatchSize, "rows copied per transaction")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "count and report; change nothing")
	fs.BoolVar(&cfg.SyncTrigger, "sync-trigger", false, "keep copying rows inserted into the legacy table later (needs --table different from the legacy table)")
	fs.BoolVar(&removeTrigger, "remove-sync-trigger", false, "drop the trigger --sync-trigger installed, and do nothing else")
	fs.StringVar(&skippedCSV, "skipped-csv", "", "write the legacy rows not copied (id, group, time, reason) to this CSV file")
	fs.DurationVar(&cfg.LockTimeout, "lock-timeout", migrate.DefaultLockTimeout, "give up DDL on the legacy table (rename, sync trigger) if it stays locked this long; its writers wait at most this long behind it")
	fs.DurationVar(&cfg.LockTimeout, "rename-lock-timeout", migrate.DefaultLockTimeout, "former name of --lock-timeout")
	fs.IntVar(&cfg.LockAttempts, "lock-attempts", migrate.DefaultLockAttempts, "tries of DDL on the legacy table that hits --lock-timeout, one lock timeout apart")
	fs.BoolVar(&cfg.ConfirmPartitionDrop, "confirm-partition-drop", false, "let --retention drop partitions of an existing table that hold rows (refused otherwise)")
	fs.BoolVar(&verbose, "v", false, "log every batch")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dedup-migrate: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.Table.Scope, cfg.Table.Interval = dedup.Scope(scope), dedup.Interval(interval)
	if removeTrigger && (cfg.SyncTrigger || cfg.DryRun) {
		fmt.Fprintln(stderr, "dedup-migrate: --remove-sync-trigger does nothing else: drop --sync-trigger and --dry-run")
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "dedup-migrate:", err)
		return 2
	}
	if url == "" {
		url = getenv("DATABASE_URL")
	}
	if url == "" {
		fmt.Fprintln(stderr, "dedup-migrate: set DATABASE_URL (or --database-url)")
		return 2
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error can quote the URL, password included.
		fmt.Fprintln(stderr, "dedup-migrate: the database URL cannot be parsed")
		return 2
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "dedup-migrate"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintln(stderr, "dedup-migrate: connecting:", err)
		return 1
	}
	defer pool.Close()

	if removeTrigger {
		if err := migrate.RemoveSyncTrigger(ctx, pool, cfg); err != nil {
			fmt.Fprintln(stderr, "dedup-migrate:", err)
			return 1
		}
		fmt.Fprintf(stdout, "sync trigger %s removed\n", migrate.SyncTriggerName)
		return 0
	}
	if skippedCSV != "" && cfg.DryRun {
		fmt.Fprintf(stderr, "dedup-migrate: dry run: %s is not written (a dry run changes nothing)\n", skippedCSV)
	} else if skippedCSV != "" {
		f, err := os.Create(skippedCSV)
		if err != nil {
			fmt.Fprintln(stderr, "dedup-migrate:", err)
			return 1
		}
		defer f.Close()
		cfg.Skipped = f
	}
	start := time.Now()
	rep, err := migrate.Run(ctx, pool, cfg)
	if rep != nil {
		rep.Write(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "dedup-migrate:", err)
		if rep != nil && rep.Interrupted || errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "dedup-migrate: interrupted; run again to finish")
		}
		if errors.Is(err, migrate.ErrInvalidConfig) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stdout, "done in %s\n", time.Since(start).Round(time.Millisecond))
	return 0
}
