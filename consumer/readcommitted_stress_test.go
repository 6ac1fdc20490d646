package consumer_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
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

// restartableKafka is a one-broker kfake cluster persisted to a directory
// with every batch synced (as cmd/devbroker runs it for make chaos), on a
// fixed port, so that it can be crashed and started again under the
// clients' feet.
type restartableKafka struct {
	mu   sync.Mutex
	k    *consumertest.Kafka
	dir  string
	opts []kfake.Opt
	addr string
}

func newRestartableKafka(t *testing.T) *restartableKafka {
	t.Helper()
	port, err := consumertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &restartableKafka{dir: t.TempDir()}
	r.opts = []kfake.Opt{kfake.Ports(port), kfake.DataDir(r.dir), kfake.SyncWrites()}
	if r.k, err = consumertest.StartKafka(r.opts...); err != nil {
		t.Fatal(err)
	}
	r.addr = r.k.Brokers()[0]
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.k.Close()
	})
	return r
}

// kafka is the running cluster.
func (r *restartableKafka) kafka() *consumertest.Kafka {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.k
}

// crash stops the broker as kill -9 would leave it and starts it again from
// its directory. kfake writes its partition snapshots, producer sequence
// windows and session state (open transactions, group members) only at a
// clean shutdown, so the files a clean Close wrote are removed before the
// restart: the broker then recovers the way it does after kill -9, from the
// synced segment files alone (the path cmd/devbroker takes in make chaos).
func (r *restartableKafka) crash(t *testing.T, down time.Duration) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.k.Close()
	err := filepath.WalkDir(r.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch d.Name() {
		case "snapshot.json", "seq_windows.json", "session_state.json":
			return os.Remove(path)
		}
		return nil
	})
	if err != nil {
		t.Errorf("removing the clean-shutdown files: %v", err)
	}
	time.Sleep(down)
	for range 50 { // the port may linger for a moment
		if r.k, err = consumertest.StartKafka(r.opts...); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("restarting the broker: %v", err)
}

// logRecord is one record of the log as read back at ReadUncommitted.
type logRecord struct {
	offset  int64
	value   string
	pid     int64
	txn     bool
	control bool
	commit  bool // for a control record: a commit marker
	visible bool // for a data record: plain, or in a committed transaction
	pending bool // in a transaction with no marker
}

// readRawLog reads partition p of topic from 0 to end at ReadUncommitted,
// control records included, and works out which data records a
// ReadCommitted reader must return: plain ones, and those of a transaction
// whose marker (the producer's next control record) is a commit.
func readRawLog(t *testing.T, addr, topic string, p int32, end int64) []logRecord {
	t.Helper()
	if end == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(0)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []logRecord
	for len(recs) == 0 || recs[len(recs)-1].offset < end-1 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading partition %d back: got %d records, want up to offset %d", p, len(recs), end-1)
		}
		fs.EachRecord(func(r *kgo.Record) {
			lr := logRecord{offset: r.Offset, value: string(r.Value), pid: r.ProducerID,
				txn: r.Attrs.IsTransactional(), control: r.Attrs.IsControl()}
			if lr.control {
				if len(r.Key) < 4 {
					t.Fatalf("partition %d offset %d: control record key %x", p, r.Offset, r.Key)
				}
				lr.commit = binary.BigEndian.Uint16(r.Key[2:4]) == 1
			}
			recs = append(recs, lr)
		})
	}
	open := map[int64][]int{} // producer id -> its records in its open transaction
	for i := range recs {
		r := &recs[i]
		switch {
		case r.control:
			for _, j := range open[r.pid] {
				recs[j].visible = r.commit
				recs[j].pending = false
			}
			delete(open, r.pid)
		case r.txn:
			r.pending = true
			open[r.pid] = append(open[r.pid], i)
		default:
			r.visible = true
		}
	}
	return recs
}

// readLogs reads every partition back; no record may be left in a
// transaction without a marker.
func readLogs(t *testing.T, addr, topic string, parts int) [][]logRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ends map[int]int64
	var err error
	for range 50 { // ListOffsets can fail for a moment after a restart
		if ends, err = consumertest.EndOffsets(ctx, []string{addr}, topic, parts); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	logs := make([][]logRecord, parts)
	for p := range parts {
		logs[p] = readRawLog(t, addr, topic, int32(p), ends[p])
		var ctl, vis, hidden, pending int
		for _, r := range logs[p] {
			switch {
			case r.control:
				ctl++
			case r.pending:
				pending++
			case r.visible:
				vis++
			default:
				hidden++
			}
		}
		t.Logf("partition %d: %d records: %d visible, %d aborted, %d markers, %d in transactions never ended", p, len(logs[p]), vis, hidden, ctl, pending)
		if pending > 0 {
			t.Errorf("partition %d: %d records in transactions with no marker", p, pending)
		}
	}
	return logs
}

// delivered is one record a kafka-go reader returned.
type delivered struct {
	offset int64
	value  string
}

// checkDelivery compares what a reader returned from start on with the log:
// every visible record at or after start, once, in order, and nothing else.
func checkDelivery(log []logRecord, start int64, got []delivered, uncommitted bool) error {
	var want []delivered
	byOffset := map[int64]logRecord{}
	for _, r := range log {
		byOffset[r.offset] = r
		if r.offset < start || r.control || (!uncommitted && !r.visible) {
			continue
		}
		want = append(want, delivered{r.offset, r.value})
	}
	describe := func(off int64) string {
		r := byOffset[off]
		switch {
		case r.control:
			return "a transaction marker"
		case r.txn && r.visible:
			return "in a committed transaction"
		case r.txn:
			return "in an aborted transaction"
		}
		return "plain"
	}
	for i := 0; i < len(got) || i < len(want); i++ {
		switch {
		case i >= len(got):
			return fmt.Errorf("returned %d records, want %d: first missing: offset %d (%s)", len(got), len(want), want[i].offset, describe(want[i].offset))
		case i >= len(want):
			return fmt.Errorf("returned %d records, want %d: first extra: offset %d (%s)", len(got), len(want), got[i].offset, describe(got[i].offset))
		case got[i] != want[i]:
			return fmt.Errorf("record %d: got offset %d (%s), want offset %d (%s)", i, got[i].offset, describe(got[i].offset), want[i].offset, describe(want[i].offset))
		}
	}
	return nil
}

// lastVisible is the offset of the partition's last record a reader at the
// given isolation returns, -1 if none.
func lastVisible(log []logRecord, uncommitted bool) int64 {
	for i := len(log) - 1; i >= 0; i-- {
		if !log[i].control && (uncommitted || log[i].visible) {
			return log[i].offset
		}
	}
	return -1
}

// readPartition reads partition p at the given isolation from start until it
// has returned the record at last, or, with last -1, until stop is closed.
// With reopenEvery > 0 it closes its reader after that many records and
// opens a new one at the next offset, as a rebalance would. progress, if
// not nil, gets the next offset after every record.
func readPartition(ctx context.Context, addr, topic string, p int, start, last int64, maxBytes int, level kafka.IsolationLevel, reopenEvery int, stop <-chan struct{}, progress *atomic.Int64) ([]delivered, error) {
	var got []delivered
	next := start
	for {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: []string{addr}, Topic: topic, Partition: p,
			MinBytes: 1, MaxBytes: maxBytes, MaxWait: 50 * time.Millisecond,
			ReadBackoffMin: 10 * time.Millisecond, ReadBackoffMax: 100 * time.Millisecond,
			IsolationLevel: level, MaxAttempts: 1000,
		})
		if err := r.SetOffset(next); err != nil {
			r.Close()
			return got, err
		}
		n := 0
		for reopenEvery == 0 || n < reopenEvery {
			if last >= 0 && next > last {
				r.Close()
				return got, nil
			}
			fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			m, err := r.FetchMessage(fctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					r.Close()
					return got, fmt.Errorf("returned %d records, up to offset %d: %w", len(got), next-1, ctx.Err())
				}
				select {
				case <-stop:
					r.Close()
					return got, nil
				default:
				}
				continue
			}
			if m.Offset < next {
				r.Close()
				return got, fmt.Errorf("offset %d returned after offset %d", m.Offset, next-1)
			}
			got = append(got, delivered{m.Offset, string(m.Value)})
			next = m.Offset + 1
			if progress != nil {
				progress.Store(next)
			}
			n++
		}
		r.Close()
	}
}

// stressValue is a record's value: a JSON envelope with a fresh UUIDv7, so
// that the runtime can handle it too, naming who wrote it.
func stressValue(src string) []byte {
	id, err := uuid.NewV7()
	if err != nil {
		panic(err)
	}
	v, _ := json.Marshal(map[string]string{"eventId": id.String(), "type": "stress", "src": src})
	return v
}

// stressProducer writes transactions of rng-chosen size, partitions and
// outcome; some stay open while the plain producers write many records.
type stressProducer struct {
	id    string
	addr  string
	topic string
	parts int32
	codec kgo.CompressionCodec
	rng   *rand.Rand
	cl    *kgo.Client

	committed, aborted, failed int
}

func (p *stressProducer) client() (*kgo.Client, error) {
	if p.cl != nil {
		return p.cl, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(p.addr),
		kgo.TransactionalID(p.id),
		kgo.DefaultProduceTopic(p.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(p.codec),
		kgo.TransactionTimeout(10*time.Second),
		kgo.RequestRetries(20),
	)
	if err != nil {
		return nil, err
	}
	p.cl = cl
	return cl, nil
}

func (p *stressProducer) close() {
	if p.cl != nil {
		p.cl.Close()
		p.cl = nil
	}
}

// txn runs one transaction of n records; a transaction the broker's crash
// cut counts as failed (the log says what became of it), and the next
// transaction uses a new client, which fences the old one.
func (p *stressProducer) txn(ctx context.Context, n int) {
	commit := p.rng.IntN(3) != 0
	long := p.rng.IntN(6) == 0
	cl, err := p.client()
	if err == nil {
		err = cl.BeginTransaction()
	}
	for i := 0; err == nil && i < n; {
		k := min(n-i, 1+p.rng.IntN(6))
		recs := make([]*kgo.Record, k)
		part := p.rng.Int32N(p.parts)
		for j := range recs {
			recs[j] = &kgo.Record{Partition: part, Value: stressValue(fmt.Sprintf("%s/%d", p.id, i+j))}
		}
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		i += k
		if long {
			time.Sleep(time.Duration(20+p.rng.IntN(60)) * time.Millisecond)
		}
	}
	if err == nil {
		ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = cl.EndTransaction(ectx, kgo.TransactionEndTry(commit))
		cancel()
	}
	switch {
	case err != nil:
		p.failed++
		p.close()
	case commit:
		p.committed++
	default:
		p.aborted++
	}
}

// stressWorkload is what writeStressLog writes.
type stressWorkload struct {
	parts           int
	txnProducers    int
	txnsPerProducer int
	// crashAt is the share of the transactions after which the broker
	// crashes (0: no crash).
	crashAt float64
}

// writeStressLog runs the transactional and plain producers of w on topic
// until every transaction is done, crashing the broker once on the way if
// w says so.
func writeStressLog(ctx context.Context, t *testing.T, kf *restartableKafka, topic string, w stressWorkload, rng *rand.Rand) {
	t.Helper()
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression(), kgo.GzipCompression()}
	var producers []*stressProducer
	for i := range w.txnProducers {
		producers = append(producers, &stressProducer{id: fmt.Sprintf("stress-tx-%d", i), addr: kf.addr, topic: topic, parts: int32(w.parts),
			codec: codecs[i%len(codecs)], rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))})
	}
	var txnsDone atomic.Int64
	var prodWG sync.WaitGroup
	for _, p := range producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			defer p.close()
			for range w.txnsPerProducer {
				p.txn(ctx, 1+p.rng.IntN(25))
				txnsDone.Add(1)
			}
		}()
	}
	plainDone := make(chan struct{})
	var plainWG sync.WaitGroup
	var plainN, plainFailed atomic.Int64
	for i := range 2 {
		plainWG.Add(1)
		prng := rand.New(rand.NewPCG(rng.Uint64(), 100+uint64(i)))
		go func() {
			defer plainWG.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(kf.addr), kgo.DefaultProduceTopic(topic),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
				kgo.ProducerBatchCompression(codecs[i*3]), kgo.RequestRetries(20))
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			for n := 0; ; n++ {
				select {
				case <-plainDone:
					return
				default:
				}
				k := 1 + prng.IntN(4)
				recs := make([]*kgo.Record, k)
				part := prng.Int32N(int32(w.parts))
				for j := range recs {
					recs[j] = &kgo.Record{Partition: part, Value: stressValue(fmt.Sprintf("plain-%d/%d/%d", i, n, j))}
				}
				pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
					plainFailed.Add(1)
				} else {
					plainN.Add(int64(k))
				}
				cancel()
				time.Sleep(time.Duration(prng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	if w.crashAt > 0 {
		total := int64(len(producers) * w.txnsPerProducer)
		for txnsDone.Load() < int64(float64(total)*w.crashAt) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("crashing the broker after %d of %d transactions", txnsDone.Load(), total)
		kf.crash(t, 200*time.Millisecond)
	}
	prodWG.Wait()
	close(plainDone)
	plainWG.Wait()
	var committed, aborted, failed int
	for _, p := range producers {
		committed, aborted, failed = committed+p.committed, aborted+p.aborted, failed+p.failed
	}
	t.Logf("transactions: %d committed, %d aborted, %d cut by the crash; plain records: %d (%d produce calls failed)",
		committed, aborted, failed, plainN.Load(), plainFailed.Load())
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
