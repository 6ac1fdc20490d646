package consumer_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idempotency-dev/operator/consumer"
)

// txProducer is a transactional franz-go producer: kafka-go has none.
type txProducer struct {
	t     testing.TB
	cl    *kgo.Client
	topic string
}

func newTxProducer(t testing.TB, brokers []string, topic, txnID string) *txProducer {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		t.Fatalf("creating the transactional producer %s: %v", txnID, err)
	}
	t.Cleanup(cl.Close)
	return &txProducer{t: t, cl: cl, topic: topic}
}

func (p *txProducer) begin() {
	p.t.Helper()
	if err := p.cl.BeginTransaction(); err != nil {
		p.t.Fatalf("beginning a transaction: %v", err)
	}
}

// produce writes one envelope for id to partition inside the open transaction.
func (p *txProducer) produce(id uuid.UUID, partition int32) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := fmt.Sprintf(`{"eventId":%q,"type":"test"}`, id)
	if err := p.cl.ProduceSync(ctx, &kgo.Record{Partition: partition, Value: []byte(v)}).FirstErr(); err != nil {
		p.t.Fatalf("producing in a transaction: %v", err)
	}
}

func (p *txProducer) end(commit bool) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		p.t.Fatalf("ending a transaction (commit=%v): %v", commit, err)
	}
}

// writeTxnLog has two transactional producers write interleaved
// transactions on both partitions of e's topic, some committed and some
// aborted, with plain records in between; the log ends with an aborted
// transaction, so the last fetch holds nothing a ReadCommitted reader may
// return. It returns the ids of the plain and committed events and those of
// the aborted ones.
func writeTxnLog(t *testing.T, e *env) (committed, aborted map[uuid.UUID]bool) {
	t.Helper()
	a := newTxProducer(t, e.kafka.Brokers(), e.topic, "tx-a")
	b := newTxProducer(t, e.kafka.Brokers(), e.topic, "tx-b")
	committed, aborted = map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	record := func(ids []uuid.UUID, commit bool) {
		for _, id := range ids {
			if commit {
				committed[id] = true
			} else {
				aborted[id] = true
			}
		}
	}
	for i := range 9 {
		commitA, commitB := i%3 != 0, i%2 == 0
		a.begin()
		b.begin()
		var idsA, idsB []uuid.UUID
		for j := range 4 {
			ida, idb := newID(t), newID(t)
			a.produce(ida, int32(j%2))
			b.produce(idb, int32((j+1)%2))
			idsA, idsB = append(idsA, ida), append(idsB, idb)
			if j == 1 {
				id := newID(t)
				committed[id] = true
				e.kafka.Produce(t, e.topic, event(id, i%2, ""))
			}
		}
		a.end(commitA)
		b.end(commitB)
		record(idsA, commitA)
		record(idsB, commitB)
	}
	a.begin()
	var ids []uuid.UUID
	for j := range 3 {
		id := newID(t)
		a.produce(id, int32(j%2))
		ids = append(ids, id)
	}
	a.end(false)
	record(ids, false)
	return committed, aborted
}

// consumeExactly runs a Consumer with cfg until it has handled every event in
// want, lets it run a little longer, and checks that it handled each of them
// once and nothing else, and dead-lettered nothing: a control record (commit
// or abort marker) that reached the runtime would be dead-lettered as
// not_json.
func consumeExactly(t *testing.T, e *env, cfg consumer.Config, want, aborted map[uuid.UUID]bool) {
	t.Helper()
	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	var unexpected []string
	h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		mu.Lock()
		seen[ev.ID]++
		if !want[ev.ID] {
			unexpected = append(unexpected, fmt.Sprintf("%s (partition %d offset %d, aborted=%v)", ev.ID, ev.Partition, ev.Offset, aborted[ev.ID]))
		}
		mu.Unlock()
		return e.handler(ctx, tx, ev)
	}
	r := e.start(cfg, h)
	waitFor(t, 60*time.Second, "every expected event handled", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for id := range want {
			if seen[id] > 0 {
				n++
			}
		}
		return n == len(want), fmt.Sprintf("%d of %d handled, %d unexpected", n, len(want), len(unexpected))
	})
	// Give anything that should not come a chance to come.
	time.Sleep(2 * time.Second)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(unexpected) > 0 {
		t.Errorf("%d events the handler must not see (of %d aborted), e.g. %s", len(unexpected), len(aborted), unexpected[0])
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s handled %d times", id, n)
		}
	}
	rows, distinct := e.effects(t)
	if rows != len(want) || distinct != len(want) {
		t.Errorf("effects: %d rows, %d distinct ids; want %d of each", rows, distinct, len(want))
	}
	if dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 2*time.Second); len(dl) > 0 {
		t.Errorf("%d records dead-lettered, want none; first: key %q value %q reason %q", len(dl), dl[0].Key, dl[0].Value, header(dl[0], consumer.HeaderDLQReason))
	}
}

// TestAbortedTransactionsAreNeverHandled: with the default configuration
// (ReadCommitted) the handler gets exactly the plain and committed events,
// once each; no event of an aborted transaction and no control record reaches
// the handler or the dead-letter topic.
func TestAbortedTransactionsAreNeverHandled(t *testing.T) {
	e := newEnv(t, withPartitions(2))
	e.dumpLogsOnFailure(t)
	committed, aborted := writeTxnLog(t, e)
	consumeExactly(t, e, e.config(), committed, aborted)
}

// TestReadUncommittedHandlesAbortedTransactions: Isolation ReadUncommitted
// is what it says, aborted transactions included, and still hides the
// transaction markers.
func TestReadUncommittedHandlesAbortedTransactions(t *testing.T) {
	e := newEnv(t, withPartitions(2))
	e.dumpLogsOnFailure(t)
	committed, aborted := writeTxnLog(t, e)
	all := maps.Clone(committed)
	maps.Copy(all, aborted)
	consumeExactly(t, e, e.config(func(c *consumer.Config) { c.Isolation = consumer.IsolationReadUncommitted }), all, aborted)
}
