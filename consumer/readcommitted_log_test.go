package consumer_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

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
