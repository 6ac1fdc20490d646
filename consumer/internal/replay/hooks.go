package replay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/internal/partition"
	"github.com/idempotency-dev/operator/consumer/internal/record"
)

// engine implements partition.Replay for one apply.
var _ partition.Replay = (*engine)(nil)

// Decode passes over what the replay does not take (beyond the end offset
// of this run, not selected, over MaxCount) and turns a selected dead
// letter into the original event, as the live consumer decoded it. The item
// keeps the dead letter as its Msg: the replay's position is an offset of
// the dead-letter topic, and a record that fails again is written back from
// it.
func (e *engine) Decode(w *partition.Worker, it *record.Item, m kafka.Message) {
	if m.Offset >= w.Until {
		*it = record.Item{Msg: m, State: record.Passed}
		return
	}
	l := parseLetter(m)
	if !e.sel.selects(m, &l) || !e.take() {
		*it = record.Item{Msg: m, State: record.Passed}
		return
	}
	if e.limiter != nil {
		e.wait(w.GenCtx)
	}
	record.Decode(it, original(m, &l), w.Span, w.D.Envelope, w.D.Policies)
	it.Msg = m
}

// wait takes a token of the rate limit. It ends early when the replay
// stops: the batch in hand is then taken as it is. rate.Limiter.Wait
// refuses at once when the token would come after ctx's deadline; that
// refusal is not a licence to go on (every remaining record would pass
// unthrottled just before the deadline): the replay waits for its end.
func (e *engine) wait(ctx context.Context) {
	if err := e.limiter.Wait(ctx); err != nil && ctx.Err() == nil {
		<-ctx.Done()
	}
}

// take counts a selected record against Selection.MaxCount; false when the
// selection is exhausted. With a MaxCount the partitions run one after the
// other, so the records taken are the same in every run.
func (e *engine) take() bool {
	if e.spec.Selection.MaxCount <= 0 {
		return true
	}
	return e.taken.Add(1) <= e.spec.Selection.MaxCount
}

// Record stores the outcomes of items in the transaction that records the
// position after them.
func (e *engine) Record(ctx context.Context, tx pgx.Tx, w *partition.Worker, items []*record.Item) error {
	t := e.tallyOf(items)
	if len(t) == 0 {
		return nil
	}
	if err := e.store.add(ctx, tx, w.Partition, t); err != nil {
		return err
	}
	if len(items) > 0 {
		e.pend(w.Partition, items[len(items)-1].Msg.Offset+1, t)
	}
	return nil
}

// DeadLetter is the record a replayed event that failed again is written
// back as.
func (e *engine) DeadLetter(it *record.Item, now time.Time) kafka.Message {
	return writeBack(it, now, e.spec.ID, e.maxReplays, e.deps.Secrets)
}

// Committed counts, in the metrics, the outcomes the partition's position
// now covers.
func (e *engine) Committed(w *partition.Worker, next int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pend := e.pending[w.Partition]
	keep := pend[:0]
	for _, p := range pend {
		if p.next > next {
			keep = append(keep, p)
			continue
		}
		for name, v := range p.t {
			if _, isReason := cutReason(name); !isReason && name != cSelected && e.metric != nil {
				e.metric.WithLabelValues(name).Add(float64(v))
			}
		}
	}
	e.pending[w.Partition] = keep
}

// pend keeps t until the position reaches next (Committed); a transaction
// retried for the same records replaces its earlier attempt's.
func (e *engine) pend(p int, next int64, t tally) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pend := e.pending[p]
	for i := range pend {
		if pend[i].next == next {
			pend[i].t = t
			return
		}
	}
	e.pending[p] = append(pend, pending{next: next, t: t})
}

type pending struct {
	next int64
	t    tally
}
