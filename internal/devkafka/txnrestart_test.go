package devkafka

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// crashCopy is the data directory a broker killed with kill -9 leaves: with
// kfake.SyncWrites every answered request is on disk, so a copy taken while
// the broker is idle is what a restart after kill -9 finds. (The copy, not
// the broker's own directory, is restarted from, so that Close does not
// write the clean-shutdown state into it.)
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	crashed := filepath.Join(t.TempDir(), "crashed")
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return crashed
}

// TestRetriedCommitAfterBrokerRestart: a transaction commits, the broker is
// killed before its answer reaches the producer, and the producer retries
// its EndTxn(commit) against the restarted broker (as franz-go does after a
// broken connection). Kafka answers the retry with success and the epoch the
// commit bumped to: the transaction committed. kfake's persisted producer
// state lost what the last transaction ended with, so the retry was answered
// INVALID_TXN_STATE and the producer took a committed transaction for one of
// unknown outcome (the chaos run's transactional producer counts those as
// "unknown").
func TestRetriedCommitAfterBrokerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	b, err := Start(kfake.DataDir(dir), kfake.SyncWrites())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic(ctx, "t", 2, nil); err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...), kgo.TransactionalID("retried-commit"), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := producer.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("a")}, &kgo.Record{Partition: 1, Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	id, epoch, err := producer.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	endTxn := func(b *Broker) *kmsg.EndTxnResponse {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = "retried-commit", id, epoch, true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version < 5 {
			t.Fatalf("EndTxn v%d: the test needs v5 (KIP-890: the epoch bumps on every commit)", resp.Version)
		}
		return resp
	}
	if resp := endTxn(b); resp.ErrorCode != 0 || resp.ProducerEpoch != epoch+1 {
		t.Fatalf("commit: error %d, epoch %d; want 0 and %d", resp.ErrorCode, resp.ProducerEpoch, epoch+1)
	}

	// kill -9 before the answer got out; restart from what is on disk.
	crashed := crashCopy(t, dir)
	b.Close()
	b2, err := Start(kfake.DataDir(crashed), kfake.SyncWrites())
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if resp := endTxn(b2); resp.ErrorCode != 0 || resp.ProducerEpoch != epoch+1 {
		t.Fatalf("the commit retried after a broker restart: error %d, epoch %d; want 0 and %d (the transaction committed before the restart)",
			resp.ErrorCode, resp.ProducerEpoch, epoch+1)
	}
	ends, err := EndOffsets(ctx, b2.Brokers(), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := StableOffsets(ctx, b2.Brokers(), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	for p := range 2 {
		if ends[p] != 2 || stable[p] != 2 {
			t.Fatalf("after the restart: ends %v, stable %v; want 2 (a record and the commit marker) for both", ends, stable)
		}
	}
}

// dropLastEntries truncates an append log of kfake (pids.log: entries of a
// 4-byte little-endian length, a 4-byte CRC and length bytes) before its
// last n entries.
func dropLastEntries(t *testing.T, path string, n int) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int
	for pos := 0; pos+8 <= len(raw); {
		pos += 8 + int(binary.LittleEndian.Uint32(raw[pos:pos+4]))
		ends = append(ends, pos)
	}
	if len(ends) <= n {
		t.Fatalf("%s has %d entries, fewer than the %d to drop", path, len(ends), n)
	}
	if err := os.Truncate(path, int64(ends[len(ends)-1-n])); err != nil {
		t.Fatal(err)
	}
}

// dropLastBatch truncates a partition's only segment (record batches of a
// 8-byte offset, a 4-byte big-endian length and length bytes) and its index
// (15 bytes a batch) before the last batch.
func dropLastBatch(t *testing.T, partDir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(partDir, "0.dat"))
	if err != nil {
		t.Fatal(err)
	}
	var starts []int
	for pos := 0; pos+12 <= len(raw); pos += 12 + int(binary.BigEndian.Uint32(raw[pos+8:pos+12])) {
		starts = append(starts, pos)
	}
	if len(starts) == 0 {
		t.Fatalf("%s: no batches", partDir)
	}
	if err := os.Truncate(filepath.Join(partDir, "0.dat"), int64(starts[len(starts)-1])); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(partDir, "0.idx"), int64(15*(len(starts)-1))); err != nil {
		t.Fatal(err)
	}
}

// TestCommitCutByBrokerKillCompletes: the broker is killed while it writes
// the commit markers of a transaction over two partitions, after the one of
// partition 0 and before the one of partition 1. A Kafka coordinator logs
// its decision (PrepareCommit) before it writes any marker and completes the
// commit after a restart; the transaction is atomic. kfake's recovery took
// the unmarked partition's records for a transaction the crash cut and
// aborted them there, so the transaction was committed on partition 0 and
// aborted on partition 1, and the producer's retried commit was refused.
func TestCommitCutByBrokerKillCompletes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	b, err := Start(kfake.DataDir(dir), kfake.SyncWrites())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic(ctx, "t", 2, nil); err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...), kgo.TransactionalID("cut-commit"), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := producer.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("a")}, &kgo.Record{Partition: 1, Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	id, epoch, err := producer.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	endTxn := func(b *Broker) *kmsg.EndTxnResponse {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = "cut-commit", id, epoch, true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := endTxn(b); resp.ErrorCode != 0 {
		t.Fatalf("commit: error %d", resp.ErrorCode)
	}

	// What kill -9 leaves between the two marker writes: partition 1
	// without its marker, pids.log without what EndTxn logs after the
	// markers (the end of the transaction and the bumped epoch).
	crashed := crashCopy(t, dir)
	b.Close()
	dropLastBatch(t, filepath.Join(crashed, "partitions", "t-1"))
	dropLastEntries(t, filepath.Join(crashed, "pids.log"), 2)

	b2, err := Start(kfake.DataDir(crashed), kfake.SyncWrites())
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(b2.Brokers()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := map[int32]string{}
	for len(got) < 2 {
		fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
		fs := consumer.PollFetches(fctx)
		fcancel()
		if fctx.Err() != nil && fs.NumRecords() == 0 {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { got[r.Partition] = string(r.Value) })
	}
	if got[0] != "a" || got[1] != "b" {
		t.Fatalf("read_committed after the restart: %v; want the committed transaction's records on both partitions, {0: a, 1: b}", got)
	}
	if resp := endTxn(b2); resp.ErrorCode != 0 {
		t.Fatalf("the commit retried after the restart: error %d; want 0 (the transaction committed)", resp.ErrorCode)
	}
}

// TestCommitOfATransactionACrashAbortedIsRefused: the broker is killed
// while a transaction is open (its records written, no EndTxn yet); on
// restart recovery aborts it (PATCH.md section 2). The producer's commit,
// arriving after the restart at the epoch it had, must be refused: the
// transaction is aborted. It was answered with success when the producer's
// previous transaction had committed (EndTxn retry detection compared the
// commit with how that one ended), and after a second restart the producer
// got its old epoch back, the bump of the first recovery being in memory
// only.
func TestCommitOfATransactionACrashAbortedIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	b, err := Start(kfake.DataDir(dir), kfake.SyncWrites())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic(ctx, "t", 2, nil); err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...), kgo.TransactionalID("cut-open"), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for i, commit := range []bool{true, false} {
		if err := producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := producer.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("a")}, &kgo.Record{Partition: 1, Value: []byte("b")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if commit { // the first commits; the second stays open
			if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatalf("transaction %d: %v", i, err)
			}
		}
	}
	id, epoch, err := producer.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(b *Broker) int16 {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = "cut-open", id, epoch, true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ErrorCode
	}

	crashed := crashCopy(t, dir)
	b.Close()
	b2, err := Start(kfake.DataDir(crashed), kfake.SyncWrites())
	if err != nil {
		t.Fatal(err)
	}
	if code := commit(b2); code == 0 {
		t.Fatal("the commit of the transaction the restart aborted succeeded; want it refused")
	}
	// A second kill -9 and restart, with nothing in between.
	crashedAgain := crashCopy(t, crashed)
	b2.Close()
	b3, err := Start(kfake.DataDir(crashedAgain), kfake.SyncWrites())
	if err != nil {
		t.Fatal(err)
	}
	defer b3.Close()
	if code := commit(b3); code == 0 {
		t.Fatal("after a second restart, the commit of the transaction the first one aborted succeeded; want it refused")
	}
	ends, err := EndOffsets(ctx, b3.Brokers(), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := StableOffsets(ctx, b3.Brokers(), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	for p := range 2 {
		if stable[p] != ends[p] {
			t.Fatalf("after the restarts: ends %v, stable %v; want no transaction open", ends, stable)
		}
	}
}
