package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/replay"
)

// maxResultBytes bounds the Result written for the termination message
// (Kubernetes keeps at most 4096 bytes of it).
const maxResultBytes = 4000

// runReplay is the replay subcommand: the Spec from REPLAY_SPEC, the
// consumer's configuration as for a live run, the Result as JSON to
// REPLAY_RESULT_FILE. Exit 0 only when the replay completed.
func runReplay(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	opts, err := Parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "consumer replay: invalid configuration:\n  %s\n", strings.ReplaceAll(redact(err.Error(), opts.Secrets), "\n", "\n  "))
		return ExitConfig
	}
	var spec replay.Spec
	raw := getenv(replay.EnvSpec)
	if raw == "" {
		fmt.Fprintf(stderr, "consumer replay: %s is not set (the replay's spec as JSON)\n", replay.EnvSpec)
		return ExitConfig
	}
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(stderr, "consumer replay: %s is not a replay spec: %v\n", replay.EnvSpec, err)
		return ExitConfig
	}
	if err := spec.Validate(); err != nil {
		fmt.Fprintf(stderr, "consumer replay: %v\n", err)
		return ExitConfig
	}
	log := newLogger(opts, stderr)
	opts.Consumer.Logger = log
	// The Job runs with the consumer's resources: the same memory limit,
	// record budget and tracing as a live run.
	resolveMemoryLimit(&opts, hostCgroup, log)
	applyMemoryLimit(opts, log)
	handler, external, err := buildSink(ctx, opts, log)
	if err != nil {
		log.Error("invalid sink configuration", "err", err)
		return ExitConfig
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
	if err == nil {
		err = c.AddSecrets(opts.Secrets...)
	}
	if err != nil {
		log.Error("invalid configuration", "err", configError(err))
		return ExitConfig
	}
	go followMemoryLimit(ctx, opts, hostCgroup, log, c.SetMemoryBudget)
	res, err := c.Replay(ctx, spec)
	if err != nil && res.Error == "" {
		res.Error = redact(err.Error(), opts.Secrets)
	}
	file := getenv(replay.EnvResultFile)
	if file == "" {
		file = replay.DefaultResultFile
	}
	if werr := writeResult(file, res); werr != nil {
		log.Error("writing the replay's result", "file", file, "err", werr)
	}
	log.Info("replay result", "id", res.ID, "mode", res.Mode, "complete", res.Complete, "selected", res.Selected,
		"applied", res.Applied, "duplicates", res.Duplicates, "skipped", res.Skipped, "failedAgain", res.FailedAgain,
		"parked", res.Parked, "byReason", res.ByReason, "error", res.Error)
	if !res.Complete {
		fmt.Fprintf(stderr, "consumer replay: %s did not complete: %s (running it again with the same id resumes it)\n", spec.ID, res.Error)
		return ExitFailed
	}
	return ExitOK
}

// writeResult writes res as JSON, under maxResultBytes (the error text is
// cut first).
func writeResult(file string, res replay.Result) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if over := len(b) - maxResultBytes; over > 0 && len(res.Error) > 0 {
		res.Error = res.Error[:max(0, len(res.Error)-over-3)] + "..."
		if b, err = json.Marshal(res); err != nil {
			return err
		}
	}
	return os.WriteFile(file, b, 0o600)
}

// runDeadLetters is the dead-letters subcommand: the selection by flags, the
// consumer's configuration from its environment, a table or JSON.
func runDeadLetters(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("consumer dead-letters", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var reasons, eventIDs, partitions multi
	fs.Var(&reasons, "reason", "select this dlq-reason (repeatable; default every reason but parked)")
	fs.Var(&eventIDs, "event-id", "select this event id (repeatable)")
	fs.Var(&partitions, "partition", "select this original partition (repeatable)")
	after := fs.String("after", "", "dead-lettered at or after this time (RFC 3339)")
	before := fs.String("before", "", "dead-lettered before this time (RFC 3339)")
	key := fs.String("key", "", "select this record key")
	limit := fs.Int64("limit", 0, "list at most this many (0: all)")
	output := fs.String("o", "table", "output: table or json")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: consumer dead-letters [flags]\n\nLists the consumer's dead letters; the consumer's CONSUMER_* environment says where they are.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitConfig
	}
	var sel replay.Selection
	for _, r := range reasons {
		sel.Reasons = append(sel.Reasons, event.Reason(r))
	}
	sel.EventIDs = eventIDs
	for _, p := range partitions {
		var n int
		if _, err := fmt.Sscan(p, &n); err != nil {
			fmt.Fprintf(stderr, "consumer dead-letters: --partition %q is not a number\n", p)
			return ExitConfig
		}
		sel.Partitions = append(sel.Partitions, replay.PartitionRange{Partition: n})
	}
	for _, t := range []struct {
		flag, v string
		dst     **time.Time
	}{{"after", *after, &sel.DeadLetteredAfter}, {"before", *before, &sel.DeadLetteredBefore}} {
		if t.v == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, t.v)
		if err != nil {
			fmt.Fprintf(stderr, "consumer dead-letters: --%s: %v\n", t.flag, err)
			return ExitConfig
		}
		*t.dst = &v
	}
	if fs.Lookup("key") != nil && isSet(fs, "key") {
		sel.Key = key
	}
	sel.MaxCount = *limit
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "consumer dead-letters: -o %q: table or json\n", *output)
		return ExitConfig
	}
	opts, err := Parse(nil, getenv, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "consumer dead-letters: invalid configuration:\n  %s\n", strings.ReplaceAll(redact(err.Error(), opts.Secrets), "\n", "\n  "))
		return ExitConfig
	}
	list, err := consumer.ListDeadLetters(ctx, opts.Consumer, sel)
	if err != nil {
		fmt.Fprintf(stderr, "consumer dead-letters: %s\n", redact(err.Error(), opts.Secrets))
		return ExitFailed
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if list == nil {
			list = []replay.DeadLetter{}
		}
		if err := enc.Encode(list); err != nil {
			return ExitFailed
		}
		return ExitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tREASON\tEVENT ID\tKEY\tORIGINAL\tATTEMPTS\tREPLAYS\tERROR")
	for _, d := range list {
		errText := d.Error
		if len(errText) > 80 {
			errText = errText[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s/%d@%d\t%d\t%d\t%s\n", d.Time.UTC().Format(time.RFC3339), d.Reason, d.EventID, d.Key,
			d.OriginalTopic, d.OriginalPartition, d.OriginalOffset, d.Attempts, d.Replays, errText)
	}
	return boolCode(tw.Flush() == nil)
}

func boolCode(ok bool) int {
	if ok {
		return ExitOK
	}
	return ExitFailed
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// newLogger is the binary's logger (JSON, or text), redacting secrets.
func newLogger(opts Options, stderr io.Writer) *slog.Logger {
	var h slog.Handler
	hopts := &slog.HandlerOptions{Level: opts.LogLevel}
	if opts.LogFormat == "text" {
		h = slog.NewTextHandler(stderr, hopts)
	} else {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	return slog.New(consumer.RedactingHandler(h, opts.Secrets...))
}
