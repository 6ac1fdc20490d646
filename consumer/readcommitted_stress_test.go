package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// This file stresses ReadCommitted reading (the vendored kafka-go's filter,
// third_party/kafka-go/PATCH.md, and the broker it is tested against,
// third_party/kfake/PATCH.md) with the real kfake broker: several
// transactional producers (a third of their transactions aborted, some kept
// open while many plain records pass), plain producers, compressed and
// uncompressed batches, fetches small enough to end anywhere, readers
// started at every kind of offset, and a broker crash while transactions are
// open. What a reader must return is not taken from what the producers
// think happened but read back from the log itself (every batch, markers
// included, at ReadUncommitted with franz-go), so a broker that loses or
// changes an outcome is caught as well.

// stressSeed is the workload's random seed: STRESS_SEED, or a fixed one.
func stressSeed(t *testing.T) uint64 {
	if s := os.Getenv("STRESS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STRESS_SEED=%q: %v", s, err)
		}
		return n
	}
	return 20261203
}

// stressTxns is the number of transactions per transactional producer:
// STRESS_TXNS for a longer run, else def (a third of it with -short).
func stressTxns(t *testing.T, def int) int {
	if s := os.Getenv("STRESS_TXNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("STRESS_TXNS=%q: want a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return max(def/3, 1)
	}
	return def
}

// TestReadCommittedFetchCutByMaxBytes: an aborted transaction in a fetch
// response that MaxBytes cuts short is still hidden. kfake left a response's
// list of aborted transactions out whenever the response reached the
// request's MaxBytes, and kafka-go asks for the same MaxBytes for the
// request and the partition, so a ReadCommitted reader that was behind by
// more than a fetch returned aborted records (make chaos:
// aborted_applied>0).
func TestReadCommittedFetchCutByMaxBytes(t *testing.T) {
	k := consumertest.NewKafka(t)
	const topic = "cut"
	k.MustCreateTopic(t, topic, 1)
	addr := k.Brokers()[0]
	p := &stressProducer{id: "cut-tx", addr: addr, topic: topic, parts: 1, codec: kgo.NoCompression()}
	defer p.close()
	cl, err := p.client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plain := func(n int) {
		for i := range n {
			k.Produce(t, topic, kafka.Message{Value: stressValue(fmt.Sprintf("plain/%d", i))})
		}
	}
	txn := func(commit bool) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: stressValue(fmt.Sprintf("tx/%d", i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	plain(3)
	txn(false)
	plain(3)
	txn(true)
	txn(false)
	plain(1)
	logs := readLogs(t, addr, topic, 1)
	for _, maxBytes := range []int{1, 500, 2000, 1 << 20} {
		got, err := readPartition(ctx, addr, topic, 0, 0, lastVisible(logs[0], false), maxBytes, kafka.ReadCommitted, 0, nil, nil)
		if err == nil {
			err = checkDelivery(logs[0], 0, got, false)
		}
		if err != nil {
			t.Errorf("MaxBytes %d: %v", maxBytes, err)
		}
	}
}

// TestReadCommittedAfterBrokerCrash: a transaction the broker's crash cut
// is aborted, and the same producer's later transactions on that partition
// are returned when committed. kfake's recovery treated the cut transaction
// as aborted without writing its abort marker, so readers (kafka-go's
// filter, like the Java client's and franz-go's, ends a listed aborted
// transaction at the producer's next marker) hid the producer's next
// transaction too, committed or not, whenever one fetch held both (make
// chaos: lost>0 and "offset committed past offset ..., which was never
// handled").
func TestReadCommittedAfterBrokerCrash(t *testing.T) {
	kf := newRestartableKafka(t)
	const topic = "crash"
	kf.kafka().MustCreateTopic(t, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &stressProducer{id: "crash-tx", addr: kf.addr, topic: topic, parts: 1, codec: kgo.NoCompression()}
	defer p.close()
	produce := func(txn bool, n int, src string) {
		t.Helper()
		cl := kf.kafka()
		for i := range n {
			v := stressValue(fmt.Sprintf("%s/%d", src, i))
			if txn {
				c, err := p.client()
				if err != nil {
					t.Fatal(err)
				}
				if err := c.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err != nil {
					t.Fatalf("producing in a transaction: %v", err)
				}
			} else {
				cl.Produce(t, topic, kafka.Message{Value: v})
			}
		}
	}
	c, err := p.client()
	if err != nil {
		t.Fatal(err)
	}
	produce(false, 2, "plain-before")
	if err := c.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(true, 3, "cut") // left open by the crash
	produce(false, 2, "plain-open")
	kf.crash(t, 100*time.Millisecond)
	p.close() // its epoch is fenced; a new client takes the transactional id over
	for _, commit := range []bool{true, false, true} {
		c, err := p.client()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(true, 4, fmt.Sprintf("after-crash-commit=%v", commit))
		if err := c.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("ending a transaction after the crash: %v", err)
		}
		produce(false, 1, "plain-after")
	}
	logs := readLogs(t, kf.addr, topic, 1)
	for _, start := range []int64{0, 2, 5} {
		for _, maxBytes := range []int{1, 1 << 20} {
			got, err := readPartition(ctx, kf.addr, topic, 0, start, lastVisible(logs[0], false), maxBytes, kafka.ReadCommitted, 0, nil, nil)
			if err == nil {
				err = checkDelivery(logs[0], start, got, false)
			}
			if err != nil {
				t.Errorf("from offset %d, MaxBytes %d: %v", start, maxBytes, err)
			}
			// And by what the producer was told: the transactions
			// committed after the crash are returned, the one the
			// crash cut and the aborted one are not.
			bySrc := map[string]int{}
			for _, d := range got {
				var v struct{ Src string }
				if err := json.Unmarshal([]byte(d.value), &v); err != nil {
					t.Fatal(err)
				}
				bySrc[strings.Split(v.Src, "/")[0]]++
			}
			if n := bySrc["after-crash-commit=true"]; n != 8 {
				t.Errorf("from offset %d, MaxBytes %d: %d of the 8 records committed after the crash returned", start, maxBytes, n)
			}
			if n := bySrc["cut"] + bySrc["after-crash-commit=false"]; n != 0 {
				t.Errorf("from offset %d, MaxBytes %d: %d records of aborted transactions returned (%d of the one the crash cut)", start, maxBytes, n, bySrc["cut"])
			}
		}
	}
}

// TestReadCommittedStress runs the random workload (5 transactional
// producers, 2 plain ones, 3 partitions, every compression codec) with a
// broker crash after 40% of the transactions, while readers follow the log
// (reopened every few dozen records); then readers start at the offsets
// that matter: each marker and the one after it, the start of and offsets
// inside aborted runs, both ends, random ones, with MaxBytes from 1 byte
// (one batch per fetch) to 64 KiB, and two ReadUncommitted readers.
// STRESS_SEED runs another workload, STRESS_TXNS a longer one.
func TestReadCommittedStress(t *testing.T) {
	seed := stressSeed(t)
	t.Logf("seed %d (STRESS_SEED reruns it)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const topic, parts = "stress", 3
	w := stressWorkload{parts: parts, txnProducers: 5, txnsPerProducer: stressTxns(t, 25), crashAt: 0.4}
	kf := newRestartableKafka(t)
	kf.kafka().MustCreateTopic(t, topic, parts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stopLive := make(chan struct{})
	type liveResult struct {
		got []delivered
		err error
	}
	live := make([]liveResult, parts)
	liveNext := make([]atomic.Int64, parts)
	var liveWG sync.WaitGroup
	for p := range parts {
		liveWG.Add(1)
		go func() {
			defer liveWG.Done()
			live[p].got, live[p].err = readPartition(ctx, kf.addr, topic, p, 0, -1, 600+p*700, kafka.ReadCommitted, 37+p*50, stopLive, &liveNext[p])
		}()
	}
	writeStressLog(ctx, t, kf, topic, w, rng)
	logs := readLogs(t, kf.addr, topic, parts)

	// The live readers must have returned every visible record, in order,
	// once, and nothing else.
	deadline := time.Now().Add(30 * time.Second)
	for p := range parts {
		for lv := lastVisible(logs[p], false); liveNext[p].Load() <= lv && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond) // a chance to return what must not come
	close(stopLive)
	liveWG.Wait()
	for p := range parts {
		if live[p].err != nil {
			t.Errorf("partition %d, live reader: %v", p, live[p].err)
		}
		if err := checkDelivery(logs[p], 0, live[p].got, false); err != nil {
			t.Errorf("partition %d, live ReadCommitted reader: %v", p, err)
		}
	}

	type job struct {
		p           int
		start       int64
		maxBytes    int
		uncommitted bool
	}
	var jobs []job
	for p := range parts {
		log := logs[p]
		end := int64(len(log))
		var starts []int64
		for i, r := range log {
			switch {
			case r.control:
				starts = append(starts, r.offset, r.offset+1)
			case r.txn && !r.visible && (i == 0 || log[i-1].pid != r.pid):
				starts = append(starts, r.offset) // the start of an aborted run
			case r.txn && !r.visible && rng.IntN(4) == 0:
				starts = append(starts, r.offset) // inside an aborted run
			}
		}
		rng.Shuffle(len(starts), func(i, j int) { starts[i], starts[j] = starts[j], starts[i] })
		starts = append(starts[:min(len(starts), 12)], 0, end, end-1)
		for range 4 {
			starts = append(starts, rng.Int64N(end+1))
		}
		for _, s := range starts {
			jobs = append(jobs, job{p, s, []int{1, 300, 2000, 64 << 10}[rng.IntN(4)], false})
		}
		jobs = append(jobs, job{p, 0, 500, true}, job{p, rng.Int64N(end + 1), 1, true})
	}
	var failures atomic.Int64
	sem := make(chan struct{}, 4)
	var jobWG sync.WaitGroup
	for _, j := range jobs {
		jobWG.Add(1)
		sem <- struct{}{}
		go func() {
			defer jobWG.Done()
			defer func() { <-sem }()
			jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			level := kafka.ReadCommitted
			if j.uncommitted {
				level = kafka.ReadUncommitted
			}
			last := lastVisible(logs[j.p], j.uncommitted)
			stop := make(chan struct{})
			if last < j.start {
				// Nothing to return: give the reader a moment to return
				// something it must not.
				time.AfterFunc(500*time.Millisecond, func() { close(stop) })
				last = -1
			}
			got, err := readPartition(jctx, kf.addr, topic, j.p, j.start, last, j.maxBytes, level, 0, stop, nil)
			if err == nil {
				err = checkDelivery(logs[j.p], j.start, got, j.uncommitted)
			}
			if err != nil && failures.Add(1) <= 10 {
				t.Errorf("partition %d, reader from offset %d (MaxBytes %d, uncommitted %v): %v", j.p, j.start, j.maxBytes, j.uncommitted, err)
			}
		}()
	}
	jobWG.Wait()
	t.Logf("%d readers from chosen offsets, %d failed", len(jobs), failures.Load())
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the test ran out of time")
	}
}

// TestRuntimeReadCommittedStress runs the random workload with a broker
// crash, then lets the runtime consume the whole log twice, in two groups:
// with the defaults, and with a memory budget that cuts every fetch to
// 68 KiB (a few hundred records, so most fetch responses end in the middle
// of the log's transactions) and every batch to 10 KiB. Each group must handle
// every plain and committed event exactly once, no event of an aborted
// transaction, and dead-letter nothing (a marker that reached the runtime
// would be dead-lettered as not_json).
func TestRuntimeReadCommittedStress(t *testing.T) {
	seed := stressSeed(t)
	t.Logf("seed %d (STRESS_SEED reruns it)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	const parts = 3
	w := stressWorkload{parts: parts, txnProducers: 4, txnsPerProducer: stressTxns(t, 15), crashAt: 0.5}
	kf := newRestartableKafka(t)
	e := &env{t: t, parts: parts, topic: "events", dlq: "events.dlq", group: "g-default", logBuf: &consumertest.SyncBuffer{}, kafka: kf.kafka()}
	e.kafka.MustCreateTopic(t, e.topic, e.parts)
	e.kafka.MustCreateTopic(t, e.dlq, 1)
	e.dsn = consumertest.DatabaseURL(t)
	e.pool = newPoolFor(t, e.dsn)
	e.table = dedup.Table{Scope: dedup.ScopeConsumerGroup, Interval: dedup.Daily}
	createTables(t, e.pool, e.table)
	e.dumpLogsOnFailure(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	writeStressLog(ctx, t, kf, e.topic, w, rng)
	e.kafka = kf.kafka() // the cluster the crash started
	logs := readLogs(t, kf.addr, e.topic, parts)
	want, aborted := map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	for _, log := range logs {
		for _, r := range log {
			if r.control {
				continue
			}
			var v struct{ EventID uuid.UUID }
			if err := json.Unmarshal([]byte(r.value), &v); err != nil {
				t.Fatalf("offset %d: %v", r.offset, err)
			}
			if r.visible {
				want[v.EventID] = true
			} else {
				aborted[v.EventID] = true
			}
		}
	}
	t.Logf("%d events to handle, %d aborted", len(want), len(aborted))

	consumeExactly(t, e, e.config(), want, aborted)

	if _, err := e.pool.Exec(ctx, `TRUNCATE effect`); err != nil {
		t.Fatal(err)
	}
	e.group = "g-small-fetch"
	consumeExactly(t, e, e.config(func(c *consumer.Config) {
		// Per partition: a 68 KiB fetch (the smallest, one record of
		// the envelope's largest size and its framing), a queue of one
		// record, and batches of at most 10 KiB (about 70 records), so
		// most batches end in a record carried over to the next.
		c.Envelope.MaxBytes = 4096
		c.MemoryBudget = 60 << 10
		c.BatchSize = 200
	}), want, aborted)
}
