package devkafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOffsetsShowAnOpenTransaction: a partition with an open transaction
// has a last stable offset below its end, and Offsets says so; once the
// transaction commits, the two agree. (The chaos run prints Offsets for a
// group whose lag does not go away: a transaction the broker never ended
// holds a read_committed group back for good.)
func TestOffsetsShowAnOpenTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic(ctx, "t", 2, nil); err != nil {
		t.Fatal(err)
	}
	w := b.Writer("t")
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Partition: 1, Value: []byte("plain")}, kafka.Message{Partition: 1, Value: []byte("plain")}); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...), kgo.TransactionalID("open"), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("in a transaction")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ends, err := EndOffsets(ctx, b.Brokers(), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := StableOffsets(ctx, b.Brokers(), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	if ends[1] != 3 || stable[1] != 2 || ends[0] != 0 || stable[0] != 0 {
		t.Fatalf("with a transaction open at offset 2: ends %v, stable %v; want [1] end 3 stable 2", ends, stable)
	}
	desc := Offsets(ctx, b.Brokers(), "g", "t", 2)
	if !strings.Contains(desc, "t[1] end=3 stable=2 committed=? (a transaction open at the stable offset)") || strings.Contains(desc, "t[0] end=0 stable=0 committed=? (") {
		t.Fatalf("Offsets:\n%s", desc)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if stable, err = StableOffsets(ctx, b.Brokers(), "t", 2); err != nil || stable[1] != 4 {
		t.Fatalf("after the commit: stable %v (%v), want [1] 4 (the records and the marker)", stable, err)
	}
}
