package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"golang.org/x/time/rate"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	contract "github.com/idempotency-dev/operator/consumer/replay"
)

// Config is one replay.
type Config struct {
	Spec contract.Spec // validated
	// Deps are the live consumer's partition Deps (its topic, group,
	// dead-letter topic, pool, positions, dead-letter writer); Run derives
	// the replay's from them and changes nothing in them.
	Deps *partition.Deps
	// Pipeline is the live consumer's pipeline (txpipe or extpipe), made
	// for this replay.
	Pipeline func(*partition.Worker)
	// Inserter is the live group's, for the dry run's lookups.
	Inserter *dedup.Inserter
	// ShutdownTimeout bounds the batches in flight once ctx is done.
	ShutdownTimeout time.Duration
	// Records counts replayed records by outcome (nil: not counted).
	Records *prometheus.CounterVec
}

// engine is one apply.
type engine struct {
	spec       contract.Spec
	deps       *partition.Deps // the replay's
	sel        *selector
	maxReplays int
	limiter    *rate.Limiter
	taken      atomic.Int64
	store      *store
	metric     *prometheus.CounterVec

	mu      sync.Mutex
	pending map[int][]pending
}

// Run runs the replay until its selection is done or ctx ends (then at a
// batch boundary: what is recorded stays, the same id resumes). An error is
// returned for what prevents it from starting; a replay that started
// reports in the Result (Complete, Error).
func Run(ctx context.Context, cfg Config) (contract.Result, error) {
	spec := cfg.Spec
	res := contract.Result{ID: spec.ID, Mode: spec.Mode}
	live := cfg.Deps
	if live.DeadLetterTopic == "" {
		return res, errors.New("the consumer has no dead-letter topic")
	}
	parts, err := live.Clients.Partitions(ctx, live.DeadLetterTopic)
	if err != nil {
		return res, fmt.Errorf("listing the dead-letter topic's partitions: %w", redact.Err(err, live.Secrets...))
	}
	if spec.Mode == contract.ModeDryRun {
		return dryRun(ctx, cfg, parts)
	}
	return apply(ctx, cfg, parts)
}

// replayPolicies are the live policies as a replay applies them: a record
// that fails again for any reason goes back to the dead-letter topic (a
// replay never stops on one, nor drops one); an id outside the dedup window
// is skipped, or processed without dedup protection when the spec says so.
func replayPolicies(spec contract.Spec) map[event.Reason]event.Policy {
	pol := map[event.Reason]event.Policy{}
	for _, r := range event.Reasons {
		pol[r] = event.PolicyDeadLetter
	}
	pol[event.ReasonOutsideWindow] = event.PolicySkip
	if spec.ReplayOutsideWindow {
		pol[event.ReasonOutsideWindow] = event.PolicyProcess
	}
	return pol
}

// replayFetchMaxWait is the replay's FetchMaxWait (partition.Deps).
const replayFetchMaxWait = 20 * time.Millisecond

// bounds is where a partition's replay starts and ends.
type bounds struct {
	p          int
	stored     int64 // the replay's position (-1: none)
	start, end int64
}

func apply(ctx context.Context, cfg Config, parts []int) (contract.Result, error) {
	spec, live := cfg.Spec, cfg.Deps
	res := contract.Result{ID: spec.ID, Mode: spec.Mode}
	key := contract.PositionsKey(live.DeadLetterTopic, spec.ID)
	st := &store{pos: live.Positions, key: key, guess: map[int]tally{}}
	cutoff, err := resolveCutoff(ctx, cfg, st)
	if err != nil {
		return res, err
	}
	d := *live
	d.Topic, d.PositionsKey, d.DisableDedup = live.DeadLetterTopic, key, false
	d.Policies = replayPolicies(spec)
	// The records are all there (up to the end offsets taken below): a
	// fetch waits only at a partition's end, where the worker stops, and
	// its reader's Close waits for that fetch.
	d.FetchMaxWait = replayFetchMaxWait
	d.Log = live.Log.With("replay", spec.ID, "deadLetterTopic", live.DeadLetterTopic)
	e := &engine{spec: spec, deps: &d, sel: newSelector(spec.Selection, cutoff, spec.ID), maxReplays: spec.MaxReplays,
		store: st, metric: cfg.Records, pending: map[int][]pending{}}
	if e.maxReplays <= 0 {
		e.maxReplays = contract.DefaultMaxReplays
	}
	if spec.RatePerSecond > 0 {
		e.limiter = rate.NewLimiter(rate.Limit(spec.RatePerSecond), max(1, int(spec.RatePerSecond/10)))
	}
	d.Replay = e

	var todo []bounds
	all := make([]bounds, 0, len(parts))
	for _, p := range parts {
		b, err := partBounds(ctx, &d, p)
		if err != nil {
			return res, err
		}
		all = append(all, b)
		if b.start < b.end {
			todo = append(todo, b)
		}
	}
	if spec.Selection.MaxCount > 0 {
		done, err := st.read(ctx, live.Pool, parts, []string{cSelected})
		if err != nil {
			return res, err
		}
		e.taken.Store(done[cSelected])
	}
	d.Log.Info("replay starting", "cutoff", cutoff, "partitions", len(parts), "partitionsToRead", len(todo))

	// runCtx ends on ctx or a fatal error; hardCtx, which the batches in
	// flight use, ShutdownTimeout after ctx.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	hardCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	go func() {
		select {
		case <-runCtx.Done():
		case <-hardCtx.Done():
			return
		}
		t := time.NewTimer(max(cfg.ShutdownTimeout, time.Second))
		defer t.Stop()
		select {
		case <-t.C:
			hardStop()
		case <-hardCtx.Done():
		}
	}()
	runOne := func(b bounds) {
		genCtx, stop := context.WithCancel(runCtx)
		defer stop()
		offset := b.stored
		if offset < 0 {
			offset = kafka.FirstOffset
		}
		w := &partition.Worker{D: &d, Partition: b.p, Offset: offset, HardCtx: hardCtx, Fatal: stopRun, RunCtx: runCtx,
			Until: b.end, Stop: stop, Shares: len(todo)}
		if spec.Selection.MaxCount > 0 {
			w.Shares = 1
		}
		w.Run(genCtx, cfg.Pipeline)
	}
	if spec.Selection.MaxCount > 0 {
		// One partition after the other, in order: the records MaxCount
		// takes are the same in every run (and in the dry run).
		for _, b := range todo {
			if runCtx.Err() != nil {
				break
			}
			runOne(b)
		}
	} else {
		var wg sync.WaitGroup
		for _, b := range todo {
			wg.Go(func() { runOne(b) })
		}
		wg.Wait()
	}

	// The result is what the database holds: the whole run's counts, and
	// whether every partition's position reached its end.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	complete := true
	for _, b := range all {
		if b.start >= b.end {
			continue
		}
		pos, ok, err := live.Positions.Read(rctx, live.Pool, key, b.p)
		if err != nil {
			return res, fmt.Errorf("reading the replay's position: %w", redact.Err(err, live.Secrets...))
		}
		if !ok || pos < b.end {
			complete = false
		}
	}
	t, err := st.read(rctx, live.Pool, parts, append(append([]string{}, countNames...), reasonNames()...))
	if err != nil {
		return res, redact.Err(err, live.Secrets...)
	}
	res.Counts, res.ByReason = t.counts()
	res.Complete = complete
	if !complete {
		cause := context.Cause(runCtx)
		switch {
		case cause == nil:
			res.Error = "stopped before the end of the selection"
		case errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded):
			res.Error = "stopped before the end of the selection: " + cause.Error() + " (the same id resumes)"
		default:
			res.Error = redact.Text(cause.Error(), live.Secrets...)
		}
	}
	d.Log.Info("replay stopped", "complete", res.Complete, "selected", res.Selected, "applied", res.Applied,
		"duplicates", res.Duplicates, "skipped", res.Skipped, "failedAgain", res.FailedAgain, "parked", res.Parked)
	return res, nil
}

// partBounds reads a partition's log bounds and the replay's position in
// it. The end is taken now: what is written after (by the live consumer, or
// back by this replay) is not this run's.
func partBounds(ctx context.Context, d *partition.Deps, p int) (bounds, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	first, end, err := d.Clients.LogBounds(lctx, d.Topic, p)
	if err != nil {
		return bounds{}, fmt.Errorf("reading the dead-letter topic's offsets: %w", redact.Err(err, d.Secrets...))
	}
	b := bounds{p: p, stored: -1, start: first, end: end}
	if d.Positions != nil && d.PositionsKey != "" {
		pos, ok, err := d.Positions.Read(lctx, d.Pool, d.PositionsKey, p)
		if err != nil {
			return bounds{}, fmt.Errorf("reading the replay's position: %w", redact.Err(err, d.Secrets...))
		}
		if ok {
			b.stored = pos
			b.start = max(pos, first)
		}
	}
	return b, nil
}

// resolveCutoff is the spec's cutoff, else the one the replay's first run
// stored, else now (stored for the runs that resume it).
func resolveCutoff(ctx context.Context, cfg Config, st *store) (time.Time, error) {
	if !cfg.Spec.Cutoff.IsZero() {
		return cfg.Spec.Cutoff, nil
	}
	live := cfg.Deps
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	us, ok, err := live.Positions.Read(ctx, live.Pool, st.name(cutoffName), 0)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the replay's cutoff: %w", redact.Err(err, live.Secrets...))
	}
	if ok {
		return time.UnixMicro(us).UTC(), nil
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, _, err := live.Positions.Record(ctx, live.Pool, st.name(cutoffName), 0, now.UnixMicro()); err != nil {
		return time.Time{}, fmt.Errorf("storing the replay's cutoff: %w", redact.Err(err, live.Secrets...))
	}
	return now, nil
}
