package consumer_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestMemoryBudgetBoundsInflightBytes: with a 2 MiB budget on 4 partitions
// (1 MiB for the batches, 256 KiB per partition's batch) and records of
// 100 KiB and 300 KiB, the records larger than a partition's share go
// through alone, four partitions' first records together don't fit in the
// batches' half (so some wait for others' batches to finish), every event
// gets its effect once, and the bytes in flight never exceed the batches'
// half of the budget.
func TestMemoryBudgetBoundsInflightBytes(t *testing.T) {
	const parts, budget = 4, 2 << 20
	e := newEnv(t, withPartitions(parts))
	e.dumpLogsOnFailure(t)

	var msgs []kafka.Message
	for i := range 48 {
		size := 100 << 10
		if i%3 == 0 {
			size = 300 << 10
		}
		m, _ := paddedEvent(t, size)
		m.Partition = i % parts
		msgs = append(msgs, m)
	}
	e.kafka.Produce(t, e.topic, msgs...)

	cfg := e.config(func(c *consumer.Config) {
		c.MemoryBudget = budget
		c.Envelope.MaxBytes = 512 << 10
		c.BatchWait = 200 * time.Millisecond
	})
	r := e.start(cfg, nil)
	e.waitCaughtUp(t, 90*time.Second)

	if rows, distinct := e.effects(t); rows != len(msgs) || distinct != len(msgs) {
		t.Fatalf("%d effects for %d distinct ids, want %d of each", rows, distinct, len(msgs))
	}
	peak := consumer.PeakInflightBytes(r.c)
	if peak > budget/2 {
		t.Fatalf("peak in-flight bytes %d exceed the batches' half of the %d budget", peak, budget)
	}
	if peak < 300<<10 {
		t.Fatalf("peak in-flight bytes %d: the gauge never saw a 300 KiB record", peak)
	}
	// Each worker releases its last batch's bytes as it asks for the next.
	waitFor(t, 5*time.Second, "inflight_bytes to fall to 0", func() (bool, string) {
		v := metricValue(t, scrape(t, r.c), "idempotent_consumer_inflight_bytes")
		return v == 0, fmt.Sprint(v)
	})
	t.Logf("peak in-flight bytes %d of %d", peak, budget/2)
}

// TestMemoryBudgetExternal: the same budget bounds an external handler's
// window, where records finish one by one under key ordering: every event is
// called once, and the bytes in flight stay within the batches' half.
func TestMemoryBudgetExternal(t *testing.T) {
	const parts, budget = 4, 2 << 20
	e := newEnv(t, withPartitions(parts))
	e.dumpLogsOnFailure(t)

	var msgs []kafka.Message
	for i := range 48 {
		size := 100 << 10
		if i%3 == 0 {
			size = 300 << 10
		}
		m, _ := paddedEvent(t, size)
		m.Partition = i % parts
		m.Key = []byte(strconv.Itoa(i % 7))
		msgs = append(msgs, m)
	}
	e.kafka.Produce(t, e.topic, msgs...)

	x := newXRecorder(t, 20*time.Millisecond)
	cfg := e.config(func(c *consumer.Config) {
		c.MemoryBudget = budget
		c.Envelope.MaxBytes = 512 << 10
		c.MaxInFlight = 16
	})
	r := e.startExternal(cfg, x.handle)
	e.waitCaughtUp(t, 90*time.Second)

	calls, bad := x.snapshot()
	if len(bad) > 0 {
		t.Fatalf("order violations: %v", bad)
	}
	if len(calls) != len(msgs) {
		t.Fatalf("%d ids called, want %d", len(calls), len(msgs))
	}
	peak := consumer.PeakInflightBytes(r.c)
	if peak > budget/2 || peak < 300<<10 {
		t.Fatalf("peak in-flight bytes %d, want between one 300 KiB record and the batches' half (%d)", peak, budget/2)
	}
	waitFor(t, 5*time.Second, "inflight_bytes to fall to 0", func() (bool, string) {
		v := metricValue(t, scrape(t, r.c), "idempotent_consumer_inflight_bytes")
		return v == 0, fmt.Sprint(v)
	})
	t.Logf("peak in-flight bytes %d of %d", peak, budget/2)
}
