package membudget

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
)

func TestPlanPartitionWithoutBudgetKeepsTodaysSettings(t *testing.T) {
	got := plan(0, 8, 1<<20)
	want := Plan{QueueCapacity: 100, FetchMaxBytes: 1<<20 + 64<<10, BatchBytes: 16 << 20}
	if got != want {
		t.Fatalf("plan %+v, want %+v", got, want)
	}
	// A larger accepted value still gets a fetch that holds one record.
	if got := plan(0, 1, 4<<20); got.FetchMaxBytes != 4<<20+64<<10 {
		t.Fatalf("fetch %d for 4 MiB records", got.FetchMaxBytes)
	}
}

func TestPlanPartitionDefaultLimit(t *testing.T) {
	// The operator's default: 256 MiB limit, budget half of it, 8 partitions,
	// values up to 1 MiB.
	got := plan(128<<20, 8, 1<<20)
	cost := int64(1<<20 + 64<<10)
	if got.QueueCapacity != 5 || got.BatchBytes != 8<<20 || got.FetchMaxBytes != int(cost) {
		t.Fatalf("plan %+v, want queue 5, batch 8 MiB, fetch %d", got, cost)
	}
}

// TestPlanPartitionStaysWithinBudget checks the budget's arithmetic over a
// grid: readers (queue + 2 records of the largest accepted size each) and
// batches together stay under the budget whenever one queued record per
// partition fits, and the floors (one queued record, a fetch of one record)
// hold otherwise.
func TestPlanPartitionStaysWithinBudget(t *testing.T) {
	for _, budget := range []int64{1 << 20, 16 << 20, 64 << 20, 128 << 20, 410 << 20, 4 << 30} {
		for _, parts := range []int{0, 1, 3, 8, 32, 200} {
			for _, maxEvent := range []int{-1, 1 << 10, 64 << 10, 1 << 20, 8 << 20} {
				p := plan(budget, parts, maxEvent)
				n := int64(max(parts, 1))
				cost := recordCost(maxEvent)
				if p.QueueCapacity < 1 || p.QueueCapacity > 100 {
					t.Errorf("budget %d parts %d event %d: queue %d out of [1,100]", budget, parts, maxEvent, p.QueueCapacity)
				}
				if int64(p.FetchMaxBytes) < cost {
					t.Errorf("budget %d parts %d event %d: fetch %d below one record (%d)", budget, parts, maxEvent, p.FetchMaxBytes, cost)
				}
				if p.BatchBytes < 1 || p.BatchBytes > 16<<20 {
					t.Errorf("budget %d parts %d event %d: batch bytes %d", budget, parts, maxEvent, p.BatchBytes)
				}
				readers := n * int64(p.QueueCapacity+2) * cost
				batches := n * p.BatchBytes
				if 3*cost*n <= budget/2 && readers+batches > budget {
					t.Errorf("budget %d parts %d event %d: readers %d + batches %d exceed it", budget, parts, maxEvent, readers, batches)
				}
			}
		}
	}
}

func newTestBudget(t *testing.T, budget int64) *Budget {
	t.Helper()
	b, err := New(budget, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func msgOf(off int64, size int) *kafka.Message {
	return &kafka.Message{Offset: off, Value: make([]byte, size)}
}

type fixedOffset int64

func (o fixedOffset) Offset() int64 { return int64(o) }

func TestMemBudgetSemaphore(t *testing.T) {
	const budget = 4 << 20 // batches get 2 MiB, 1 MiB per partition with 2
	b := newTestBudget(t, budget)
	p0, p1 := b.ForPartitions(2, 64<<10), b.ForPartitions(2, 64<<10)
	ctx := context.Background()

	// A batch fills up to its share; the record that does not fit is carried.
	if err := p0.First(ctx, msgOf(0, 600<<10)); err != nil {
		t.Fatal(err)
	}
	if p0.Next(msgOf(1, 300<<10)) != true {
		t.Fatal("a record within the share was refused")
	}
	if p0.Next(msgOf(2, 200<<10)) {
		t.Fatal("a record past the partition's share was taken")
	}
	if _, ok := p0.TakeCarry(fixedOffset(2)); ok {
		t.Fatal("a carry survived a reader that moved (rewind)")
	}
	if got := b.inflight.Load(); got != 900<<10 {
		t.Fatalf("in flight %d, want %d", got, 900<<10)
	}

	// A record larger than the whole semaphore takes all of it: alone.
	p0.Release()
	if err := p0.First(ctx, msgOf(3, 3<<20)); err != nil {
		t.Fatal(err)
	}
	if p1.Next(msgOf(10, 1)) {
		t.Fatal("another partition took bytes while an oversized record held the budget")
	}
	if m, ok := p1.TakeCarry(fixedOffset(11)); !ok || m.Offset != 10 {
		t.Fatalf("carry %+v %v, want offset 10", m, ok)
	}
	// The next partition's first record waits until the oversized batch is done.
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := p1.First(waitCtx, msgOf(10, 1)); err == nil {
		t.Fatal("a first record got in while an oversized record held the whole budget")
	}
	done := make(chan error, 1)
	go func() { done <- p1.First(ctx, msgOf(10, 1)) }()
	time.Sleep(20 * time.Millisecond)
	p0.Release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting first record was not let in after the release")
	}
	p1.Release()
	if got := b.inflight.Load(); got != 0 {
		t.Fatalf("in flight %d after every release, want 0", got)
	}
	if got := b.Peak(); got != 3<<20 {
		t.Fatalf("peak %d, want the oversized record's %d", got, 3<<20)
	}
}

func TestMemBudgetUnbounded(t *testing.T) {
	b := newTestBudget(t, 0)
	p := b.ForPartitions(8, 1<<20)
	if err := p.First(context.Background(), msgOf(0, 10<<20)); err != nil {
		t.Fatal(err)
	}
	if !p.Next(msgOf(1, 6<<20)) || p.Next(msgOf(2, 1)) {
		t.Fatal("without a budget a batch holds up to 16 MiB")
	}
	p.Release()
	if b.inflight.Load() != 0 {
		t.Fatal("bytes left after release")
	}
}

func TestMemBudgetHoldRecord(t *testing.T) {
	b := newTestBudget(t, 2<<20) // 1 MiB for records in flight
	p := b.ForPartitions(2, 1<<20)
	ctx := context.Background()
	big, small := msgOf(0, 3<<20), msgOf(1, 10)
	if err := p.Hold(ctx, big); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := p.Hold(waitCtx, small); err == nil {
		t.Fatal("a record got in while an oversized one held the whole budget")
	}
	p.ReleaseRecord(big)
	if err := p.Hold(ctx, small); err != nil {
		t.Fatal(err)
	}
	p.ReleaseRecord(small)
	if b.inflight.Load() != 0 || b.Peak() != 3<<20 {
		t.Fatalf("in flight %d peak %d", b.inflight.Load(), b.Peak())
	}
}

// An in-place resize reaches the batches at once and the readers with the
// next generation's plans; a shrink lets nothing new in until what is held
// fits.
func TestMemBudgetResize(t *testing.T) {
	b := newTestBudget(t, 4<<20) // batches: 2 MiB
	ctx := context.Background()
	p := b.ForPartitions(1, 64<<10)
	if err := p.First(ctx, msgOf(0, 1<<20)); err != nil {
		t.Fatal(err)
	}
	before := b.ForPartitions(4, 64<<10).Plan

	b.Resize(2 << 20) // batches: 1 MiB, of which 1 MiB is held
	q := b.ForPartitions(4, 64<<10)
	if q.Plan == before || q.Plan != plan(2<<20, 4, 64<<10) {
		t.Fatalf("plan after the shrink %+v, want %+v (before %+v)", q.Plan, plan(2<<20, 4, 64<<10), before)
	}
	if q.Next(msgOf(10, 1)) {
		t.Fatal("a record got in after a shrink left no room")
	}
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := q.First(waitCtx, msgOf(11, 1)); err == nil {
		t.Fatal("a first record got in while the shrunk budget was full")
	}
	done := make(chan error, 1)
	go func() { done <- q.First(ctx, msgOf(11, 1)) }()
	time.Sleep(20 * time.Millisecond)
	b.Resize(8 << 20) // batches: 4 MiB: the waiter fits now
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting record was not let in after the budget grew")
	}
	if !q.Next(msgOf(12, 64<<10)) {
		t.Fatal("a record within the grown budget was refused")
	}
	p.Release()
	q.Release()
	if got := b.inflight.Load(); got != 0 {
		t.Fatalf("in flight %d after every release, want 0", got)
	}
	if got := testutil.ToFloat64(b.budgetGauge); got != 8<<20 {
		t.Fatalf("memory_budget_bytes %v, want %d", got, 8<<20)
	}

	// Unbounded stays unbounded; 0 does not lift a bound.
	u := newTestBudget(t, 0)
	u.Resize(1 << 20)
	if u.sem != nil || u.budget.Load() != 0 {
		t.Fatal("an unbounded budget took a bound")
	}
	b.Resize(0)
	if b.budget.Load() != 8<<20 {
		t.Fatal("Resize(0) lifted the bound")
	}
}
