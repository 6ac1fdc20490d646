package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
)

// txnLog is what the transactional producer knows of its transactions'
// outcomes: committed (EndTransaction committed), aborted (it aborted, and no
// commit was attempted), or unknown (a commit or abort attempt failed: the
// broker may have done either).
type txnLog struct {
	mu                          sync.Mutex
	committed, aborted, unknown map[uuid.UUID]bool
	txns                        [3]int // committed, aborted, unknown
}

func newTxnLog() *txnLog {
	return &txnLog{committed: map[uuid.UUID]bool{}, aborted: map[uuid.UUID]bool{}, unknown: map[uuid.UUID]bool{}}
}

const (
	txnCommitted = iota
	txnAborted
	txnUnknown
)

func (l *txnLog) record(ids []uuid.UUID, outcome int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := [3]map[uuid.UUID]bool{l.committed, l.aborted, l.unknown}[outcome]
	for _, id := range ids {
		m[id] = true
	}
	l.txns[outcome]++
}

// produceTxns runs a transactional producer (franz-go: kafka-go has none)
// beside the plain one: TxnShare of Events in transactions of 1 to 10 new
// events over random partitions, AbortShare of the transactions aborted, paced
// over ProduceFor. Broker restarts make some transactions fail; their outcome
// is recorded as unknown and the producer carries on with a new client.
func produceTxns(ctx context.Context, o Options, seed uint64, brokers []string, clock simClock, log *txnLog) error {
	total := int(float64(o.Events) * o.TxnShare)
	if total == 0 {
		return nil
	}
	rng := mrand.New(mrand.NewPCG(seed, 11)) //nolint:gosec // G404: a seeded workload, reproducible on purpose
	newClient := func() (*kgo.Client, error) {
		return kgo.NewClient(
			kgo.SeedBrokers(brokers...),
			kgo.TransactionalID("chaos-txn"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.DefaultProduceTopic(topic),
			kgo.TransactionTimeout(30*time.Second),
		)
	}
	cl, err := newClient()
	if err != nil {
		return fmt.Errorf("creating the transactional producer: %w", err)
	}
	defer func() { cl.Close() }()
	start := time.Now()
	for sent := 0; sent < total && ctx.Err() == nil; {
		n := min(1+rng.IntN(10), total-sent)
		abort := rng.Float64() < o.AbortShare
		ids := make([]uuid.UUID, n)
		recs := make([]*kgo.Record, n)
		for i := range ids {
			ids[i] = newV7At(clock.now(), rng)
			recs[i] = &kgo.Record{Partition: int32(rng.IntN(o.Partitions)), Key: []byte(ids[i].String()), Value: encode(ids[i])} //nolint:gosec // G115: a partition number, below o.Partitions
		}
		outcome, err := runTxn(ctx, cl, recs, abort)
		log.record(ids, outcome)
		sent += n
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The client may be stuck in a failed state: a new one with the
			// same transactional id fences the old producer epoch.
			cl.Close()
			localstack.Sleep(ctx, 200*time.Millisecond)
			if cl, err = newClient(); err != nil {
				return fmt.Errorf("recreating the transactional producer: %w", err)
			}
		}
		due := start.Add(time.Duration(float64(o.ProduceFor) * float64(sent) / float64(total)))
		localstack.Sleep(ctx, time.Until(due))
	}
	return nil
}

// runTxn writes recs in one transaction and commits it, or aborts it when
// abort is set or a write failed. It returns the outcome as far as it is known.
func runTxn(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, abort bool) (int, error) {
	if err := cl.BeginTransaction(); err != nil {
		return txnAborted, fmt.Errorf("beginning a transaction: %w", err) // nothing was written
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := cl.ProduceSync(pctx, recs...).FirstErr()
	cancel()
	// The end request is not cancelled with ctx: a cancelled EndTransaction
	// leaves its outcome unknowable.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if err != nil || abort {
		if err != nil {
			// Records still buffered would otherwise join the next transaction.
			if aerr := cl.AbortBufferedRecords(ectx); aerr != nil {
				return txnUnknown, fmt.Errorf("dropping buffered records: %w", aerr)
			}
		}
		if aerr := cl.EndTransaction(ectx, kgo.TryAbort); aerr != nil {
			return txnUnknown, fmt.Errorf("aborting a transaction: %w", aerr)
		}
		return txnAborted, err
	}
	if err := cl.EndTransaction(ectx, kgo.TryCommit); err != nil {
		_ = cl.EndTransaction(ectx, kgo.TryAbort) // as kgo documents; the outcome stays unknown
		return txnUnknown, fmt.Errorf("committing a transaction: %w", err)
	}
	return txnCommitted, nil
}

// writeSentinels writes one new event to every partition once all producing
// is done, so that each partition ends in a data record. A partition that
// ends in a transaction marker keeps a lag of 1 in the group: the runtime
// commits the offset after the last record it was handed, and markers are
// not handed out (see the report on issue 12 defect 5).
func writeSentinels(ctx context.Context, o Options, brokers []string, clock simClock, rng *mrand.Rand) error {
	w := consumertest.NewWriter(brokers, topic)
	defer w.Close()
	msgs := make([]kafka.Message, o.Partitions)
	for p := range msgs {
		msgs[p] = kafka.Message{Partition: p, Value: encode(newV7At(clock.now(), rng))}
	}
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil || ctx.Err() != nil {
			return err
		}
		localstack.Sleep(ctx, 200*time.Millisecond)
	}
}
