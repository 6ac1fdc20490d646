package devkafka

import (
	"context"
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
