package membudget

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// The memory budget (Config.MemoryBudget) bounds the bytes of records the
// process holds, across all its partitions. Records are held in two places:
//
//   - the readers: kafka-go's partition reader decodes records ahead into a
//     queue of QueueCapacity records, holds one more while it waits to queue
//     it, and the worker may hold one it fetched but could not add to the
//     batch (the carry, below). A fetch response itself is streamed from the
//     socket, record by record, so MaxBytes costs memory only through a
//     compressed record batch, which is decompressed whole.
//   - the records taken from the reader: a transactional handler's batch
//     until it is committed, an external handler's window record by record
//     until each is recorded, dead-lettered or skipped (holdRecord).
//
// Half the budget goes to each. The readers' half is split evenly between the
// partitions assigned in the generation; as kafka-go's queue is counted in
// records, not bytes, its capacity is sized for records of the largest size
// the envelope accepts. The batches' half is a process-wide byte semaphore:
// a worker acquires each record's bytes as it takes it from the reader, and
// releases them when the batch is done. Each partition's batch is also
// bounded to its share of that half, so that one partition can't starve the
// others; the first record of a batch is always let through (alone if it is
// larger than the share), waiting for the semaphore if need be.

const (
	// defaultQueueCapacity and defaultMaxBatchBytes are the reader queue
	// and batch byte bound without a budget.
	defaultQueueCapacity = 100
	defaultMaxBatchBytes = 16 << 20
	// fetchMargin is added to the largest record for the fetch size: the
	// record batch's and record's own framing, the key and the headers.
	fetchMargin = 64 << 10
	// unboundedRecordEstimate stands for the record size when the envelope
	// accepts values of any size (Envelope.MaxBytes -1).
	unboundedRecordEstimate = 1 << 20
)

// Plan is what one partition's worker may hold.
type Plan struct {
	QueueCapacity int   // kafka-go reader QueueCapacity
	FetchMaxBytes int   // kafka-go reader MaxBytes
	BatchBytes    int64 // most bytes of one batch (the first record excepted)
}

// recordCost is the most memory one record the envelope accepts can take.
func recordCost(maxEventBytes int) int64 {
	if maxEventBytes <= 0 {
		maxEventBytes = unboundedRecordEstimate
	}
	return int64(maxEventBytes) + fetchMargin
}

// plan sizes one partition's reader and batches for a budget shared
// by partitions partitions; budget 0 means unbounded (the settings without a
// budget).
func plan(budget int64, partitions, maxEventBytes int) Plan {
	cost := recordCost(maxEventBytes)
	// Without a budget a fetch is sized for one record of at least 1 MiB.
	fetch := max(cost, 1<<20+fetchMargin)
	if budget <= 0 {
		return Plan{QueueCapacity: defaultQueueCapacity, FetchMaxBytes: int(fetch), BatchBytes: defaultMaxBatchBytes}
	}
	n := int64(max(partitions, 1))
	readerShare := budget / 2 / n
	// The reader holds its queue, one record waiting to be queued and the
	// worker's carry: queue+2 records.
	q := readerShare/cost - 2
	q = min(max(q, 1), defaultQueueCapacity)
	// A smaller fetch bounds the decompressed record batch; it never goes
	// below one record of the largest accepted size, so progress is kept.
	fetch = min(fetch, max(readerShare, cost))
	batch := min(max(budget/2/n, 1), defaultMaxBatchBytes)
	return Plan{QueueCapacity: int(q), FetchMaxBytes: int(fetch), BatchBytes: batch}
}

// Budget is the process-wide part of the memory budget: the batches'
// byte semaphore and the in-flight bytes gauge.
type Budget struct {
	// budget sizes the plans of the next generation (ForPartitions); Resize
	// changes it.
	budget atomic.Int64
	// sem bounds the batches' bytes to half the budget; nil without a
	// budget. A record larger than that takes it alone.
	sem         *sem
	budgetGauge prometheus.Gauge
	inflight    atomic.Int64
	peak        atomic.Int64 // highest inflight seen (Peak)
	gauge       prometheus.Gauge
}

func New(budget int64, reg prometheus.Registerer) (*Budget, error) {
	b := &Budget{
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: telemetry.Namespace, Name: "inflight_bytes",
			Help: "Bytes (keys, values and headers) of the records taken from the partition readers and not done yet, all partitions together.",
		}),
	}
	b.budget.Store(budget)
	b.budgetGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: telemetry.Namespace, Name: "memory_budget_bytes",
		Help: "The memory budget the readers and batches are sized to (0: unbounded).",
	})
	b.budgetGauge.Set(float64(budget))
	for _, col := range []prometheus.Collector{b.gauge, b.budgetGauge} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("registering memory budget metrics: %w", err)
		}
	}
	if budget > 0 {
		b.sem = newSem(max(budget/2, 1))
	}
	return b, nil
}

// Resize follows a new budget (an in-place resize of the container's
// memory): the batches' half at once (after a shrink, new records wait
// until what is held fits), the readers with the next generation's plans.
// A budget that was unbounded stays so, and a bounded one is not lifted (0
// is ignored): the readers were sized without, or with, a bound for the
// process's life.
func (b *Budget) Resize(budget int64) {
	if b.sem == nil || budget <= 0 {
		return
	}
	b.budget.Store(budget)
	b.budgetGauge.Set(float64(budget))
	b.sem.Resize(max(budget/2, 1))
}

func (b *Budget) add(n int64) {
	v := b.inflight.Add(n)
	b.gauge.Set(float64(v))
	for {
		p := b.peak.Load()
		if v <= p || b.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// Partition is one worker's part of the budget: its plan, the bytes its
// current batch holds, and the carry.
type Partition struct {
	b    *Budget
	Plan Plan
	// What the current batch holds of the semaphore (acquired; 0 without a
	// budget) and counts in the gauge (bytes).
	acquired, bytes int64
	batchBytes      int64 // bytes of the batch being collected
	// carry is a record fetched from the reader that did not fit in the
	// batch being collected; it starts the next one.
	carry *kafka.Message
}

// ForPartitions returns a worker's share when partitions are assigned to the
// process in the generation.
func (b *Budget) ForPartitions(partitions, maxEventBytes int) *Partition {
	return &Partition{b: b, Plan: plan(b.budget.Load(), partitions, maxEventBytes)}
}

func msgBytes(m *kafka.Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// Release gives back what the worker's batch holds: its batch is done
// (committed or given up).
func (p *Partition) Release() {
	// The gauge first: then it never shows more than the semaphore holds.
	if p.bytes > 0 {
		p.b.add(-p.bytes)
	}
	if p.acquired > 0 {
		p.b.sem.Release(p.acquired)
	}
	p.acquired, p.bytes, p.batchBytes = 0, 0, 0
}

// TakeCarry returns the carried record, unless the reader was moved since
// (a rewind): then the record is dropped, as the reader will return it, or
// skip it, itself.
func (p *Partition) TakeCarry(r interface{ Offset() int64 }) (kafka.Message, bool) {
	m := p.carry
	p.carry = nil
	if m == nil || m.Offset+1 != r.Offset() {
		return kafka.Message{}, false
	}
	return *m, true
}

// First accounts for a batch's first record, waiting for the semaphore if
// other partitions' batches hold it. A record larger than the whole
// semaphore waits until nothing else is held and then goes through alone.
func (p *Partition) First(ctx context.Context, m *kafka.Message) error {
	n := msgBytes(m)
	if p.b.sem != nil {
		if err := p.b.sem.Acquire(ctx, n); err != nil {
			return err
		}
		p.acquired += n
	}
	p.bytes += n
	p.batchBytes = n
	p.b.add(n)
	return nil
}

// Next accounts for a further record of the batch; false (the record is
// carried to the next batch) when it would take the batch over its share or
// the semaphore has no room now.
func (p *Partition) Next(m *kafka.Message) bool {
	n := msgBytes(m)
	if p.batchBytes+n > p.Plan.BatchBytes {
		p.carry = m
		return false
	}
	if p.b.sem != nil {
		if !p.b.sem.TryAcquire(n) {
			p.carry = m
			return false
		}
		p.acquired += n
	}
	p.bytes += n
	p.batchBytes += n
	p.b.add(n)
	return true
}

// Hold accounts for one record held outside a batch (the external
// handlers' window, where records finish one by one) until releaseRecord:
// it waits for the semaphore while other records hold the budget. A record
// larger than the semaphore goes through alone. The caller bounds the
// partition's own bytes to plan.batchBytes. Safe for concurrent use.
func (p *Partition) Hold(ctx context.Context, m *kafka.Message) error {
	n := msgBytes(m)
	if p.b.sem != nil {
		if err := p.b.sem.Acquire(ctx, n); err != nil {
			return err
		}
	}
	p.b.add(n)
	return nil
}

// ReleaseRecord gives back what holdRecord took for m.
func (p *Partition) ReleaseRecord(m *kafka.Message) {
	n := msgBytes(m)
	p.b.add(-n)
	if p.b.sem != nil {
		p.b.sem.Release(n)
	}
}

// Peak is the highest value the inflight_bytes gauge has had.
func (b *Budget) Peak() int64 { return b.peak.Load() }
