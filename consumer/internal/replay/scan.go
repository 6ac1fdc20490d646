package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/envelope"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/broker"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	contract "github.com/idempotency-dev/operator/consumer/replay"
)

// lookupBatch is how many ids the dry run looks up in one SELECT.
const lookupBatch = 1000

// scan reads partition p of topic from its log start to the end offset taken
// now, handing fn each record in offset order; fn returns false to stop.
func scan(ctx context.Context, cl *broker.Clients, topic string, p int, iso kafka.IsolationLevel, fn func(kafka.Message) bool) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	first, end, err := cl.LogBounds(lctx, topic, p)
	cancel()
	if err != nil {
		return err
	}
	if first >= end {
		return nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: cl.Brokers, Topic: topic, Partition: p, Dialer: cl.Dialer,
		MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 500 * time.Millisecond, IsolationLevel: iso, MaxAttempts: 3})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		return err
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return err
		}
		if m.Offset >= end || !fn(m) || m.Offset+1 >= end {
			return nil
		}
	}
}

// dryRun reads the selection and counts it, changing nothing: the
// partitions one after the other (so MaxCount takes the records an apply
// takes), the ids looked up in the dedup table by read-only SELECTs to
// count those already recorded (Duplicates) and those outside the window
// (Skipped, unless the spec replays them).
func dryRun(ctx context.Context, cfg Config, parts []int) (contract.Result, error) {
	spec, d := cfg.Spec, cfg.Deps
	res := contract.Result{ID: spec.ID, Mode: spec.Mode, ByReason: map[event.Reason]int64{}}
	cutoff := spec.Cutoff
	if cutoff.IsZero() {
		cutoff = time.Now()
	}
	sel := newSelector(spec.Selection, cutoff, spec.ID)
	var ids []uuid.UUID
	lookup := func() error {
		if len(ids) == 0 {
			return nil
		}
		recorded, outside, err := cfg.Inserter.Recorded(ctx, d.Pool, ids)
		if err != nil {
			return fmt.Errorf("looking the selected ids up: %w", redact.Err(err, d.Secrets...))
		}
		for i := range ids {
			switch {
			case outside[i] && !spec.ReplayOutsideWindow:
				res.Skipped++
			case recorded[i]:
				res.Duplicates++
			}
		}
		ids = ids[:0]
		return nil
	}
	full := false
	var lookErr error
	for _, p := range parts {
		err := scan(ctx, d.Clients, d.DeadLetterTopic, p, d.Isolation, func(m kafka.Message) bool {
			l := parseLetter(m)
			if !sel.selects(m, &l) {
				return true
			}
			if spec.Selection.MaxCount > 0 && res.Selected >= spec.Selection.MaxCount {
				full = true
				return false
			}
			res.Selected++
			res.ByReason[l.reason]++
			orig := original(m, &l)
			eh := make([]envelope.Header, len(orig.Headers))
			for i, h := range orig.Headers {
				eh[i] = envelope.Header{Key: h.Key, Value: h.Value}
			}
			if dec, err := envelope.Decode(orig.Value, eh, d.Envelope); err == nil {
				ids = append(ids, dec.ID)
			}
			if len(ids) >= lookupBatch {
				if lookErr = lookup(); lookErr != nil {
					return false
				}
			}
			return true
		})
		if lookErr != nil {
			return res, lookErr
		}
		if err != nil {
			if ctx.Err() != nil {
				res.Error = "stopped before the end of the selection: " + context.Cause(ctx).Error()
				return res, nil
			}
			return res, fmt.Errorf("reading the dead-letter topic: %w", redact.Err(err, d.Secrets...))
		}
		if full {
			break
		}
	}
	if err := lookup(); err != nil {
		return res, err
	}
	res.Complete = true
	d.Log.Info("replay dry run", "replay", spec.ID, "selected", res.Selected, "duplicates", res.Duplicates,
		"skipped", res.Skipped, "byReason", res.ByReason)
	return res, nil
}

// List returns the dead letters of topic that sel selects (MaxCount bounds
// how many; no cutoff), the partitions in order, each in offset order.
func List(ctx context.Context, cl *broker.Clients, topic string, iso kafka.IsolationLevel, sel contract.Selection, secrets []string) ([]contract.DeadLetter, error) {
	parts, err := cl.Partitions(ctx, topic)
	if err != nil {
		return nil, redact.Err(err, secrets...)
	}
	s := newSelector(sel, time.Time{}, "")
	var out []contract.DeadLetter
	for _, p := range parts {
		full := false
		err := scan(ctx, cl, topic, p, iso, func(m kafka.Message) bool {
			l := parseLetter(m)
			if !s.selects(m, &l) {
				return true
			}
			if sel.MaxCount > 0 && int64(len(out)) >= sel.MaxCount {
				full = true
				return false
			}
			out = append(out, listed(m, &l))
			return true
		})
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return out, err
			}
			return out, fmt.Errorf("reading the dead-letter topic: %w", redact.Err(err, secrets...))
		}
		if full {
			break
		}
	}
	return out, nil
}
