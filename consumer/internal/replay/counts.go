package replay

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	contract "github.com/idempotency-dev/operator/consumer/replay"
)

// The durable counts of an apply are rows of the positions table, one per
// count and dead-letter partition, under the replay's key + "#" + the
// count's name, each written in the transaction that records the
// partition's position after the records it counts: a count moves exactly
// when the position does.
const (
	cSelected    = "selected"
	cApplied     = "applied"
	cDuplicates  = "duplicates"
	cSkipped     = "skipped"
	cFailedAgain = "failedAgain"
	cParked      = "parked"
	reasonPrefix = "reason/"
	// cutoffName is the row (partition 0) that keeps the cutoff of a replay
	// whose spec has none, in microseconds since the epoch: the first run's
	// start, so that a resumed run selects what the first one would have.
	cutoffName = "cutoff"
)

var countNames = []string{cSelected, cApplied, cDuplicates, cSkipped, cFailedAgain, cParked}

// tally is a set of counts by name.
type tally map[string]int64

// counts turns a tally into the contract's counts and per-reason counts.
func (t tally) counts() (contract.Counts, map[event.Reason]int64) {
	c := contract.Counts{Selected: t[cSelected], Applied: t[cApplied], Duplicates: t[cDuplicates], Skipped: t[cSkipped],
		FailedAgain: t[cFailedAgain], Parked: t[cParked]}
	var by map[event.Reason]int64
	for k, v := range t {
		if r, ok := cutReason(k); ok && v != 0 {
			if by == nil {
				by = map[event.Reason]int64{}
			}
			by[r] += v
		}
	}
	return c, by
}

func cutReason(k string) (event.Reason, bool) {
	if len(k) > len(reasonPrefix) && k[:len(reasonPrefix)] == reasonPrefix {
		return event.Reason(k[len(reasonPrefix):]), true
	}
	return "", false
}

// reasonNames are the per-reason counts a result reads: every reason a
// dead letter of this runtime can carry.
func reasonNames() []string {
	out := make([]string, 0, len(event.Reasons)+1)
	for _, r := range append(append([]event.Reason{}, event.Reasons...), contract.ReasonParked) {
		out = append(out, reasonPrefix+string(r))
	}
	return out
}

// outcome is the count an item's final state goes to ("" for a record passed
// over).
func (e *engine) outcome(it *record.Item) string {
	switch it.State {
	case record.Passed:
		return ""
	case record.Handled, record.Pending: // Pending: outside the window under ReplayOutsideWindow, handled
		return cApplied
	case record.Duplicate:
		return cDuplicates
	case record.Rejected:
		if it.Reason == event.ReasonOutsideWindow && it.Policy == event.PolicySkip {
			return cSkipped
		}
		l := parseLetter(it.Msg)
		if parks(&l, e.maxReplays) {
			return cParked
		}
		return cFailedAgain
	}
	return ""
}

// tallyOf counts items' outcomes, and the selected by their dead-letter
// reason.
func (e *engine) tallyOf(items []*record.Item) tally {
	t := tally{}
	for _, it := range items {
		o := e.outcome(it)
		if o == "" {
			continue
		}
		t[cSelected]++
		t[o]++
		t[reasonPrefix+string(parseLetter(it.Msg).reason)]++
	}
	return t
}

// store keeps a partition's counts in the database.
type store struct {
	pos *dedup.Positions
	key string // the replay's positions key

	mu    sync.Mutex
	guess map[int]tally // per partition: what this process last wrote
}

func (s *store) name(count string) string { return s.key + "#" + count }

// add adds t to partition p's counts in tx. Each count is one upsert of
// the value this process expects plus the delta; the value it replaced is
// checked, and when it is not the expected one (an earlier transaction rolled
// back) the count is written again from it. One worker writes a partition's
// counts at a time, and its rows are locked by the first write until the
// transaction ends.
func (s *store) add(ctx context.Context, tx pgx.Tx, p int, t tally) error {
	s.mu.Lock()
	g := s.guess[p]
	if g == nil {
		g = tally{}
		s.guess[p] = g
	}
	s.mu.Unlock()
	for name, d := range t {
		if d == 0 {
			continue
		}
		s.mu.Lock()
		want := g[name]
		s.mu.Unlock()
		prev, _, err := s.pos.Record(ctx, tx, s.name(name), p, want+d)
		if err != nil {
			return err
		}
		if prev != want {
			if _, _, err := s.pos.Record(ctx, tx, s.name(name), p, prev+d); err != nil {
				return err
			}
		}
		s.mu.Lock()
		g[name] = prev + d
		s.mu.Unlock()
	}
	return nil
}

// read returns the stored counts of the partitions (names: which).
func (s *store) read(ctx context.Context, q dedup.Queryer, parts []int, names []string) (tally, error) {
	t := tally{}
	for _, p := range parts {
		for _, n := range names {
			v, ok, err := s.pos.Read(ctx, q, s.name(n), p)
			if err != nil {
				return nil, fmt.Errorf("reading the replay's counts: %w", err)
			}
			if ok {
				t[n] += v
			}
		}
	}
	return t, nil
}
