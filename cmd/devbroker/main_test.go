package main

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/internal/devkafka"
)

// TestOffsetFetchOfGroupWithoutCommits: an OffsetFetch for a group that
// never committed (and never joined) is answered as Kafka answers it, with
// offset -1 for every partition asked for and no error, not with
// GROUP_ID_NOT_FOUND (69), which kafkajs's consumer start-up had to
// special-case. A group that committed gets its offsets as before.
func TestOffsetFetchOfGroupWithoutCommits(t *testing.T) {
	b, err := devkafka.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	answerOffsetFetchLikeKafka(b.Cluster())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addrs := b.Brokers()
	if err := devkafka.CreateTopic(ctx, addrs, "t", 3, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the control function keeps answering
		got, err := devkafka.CommittedOffsets(ctx, addrs, "never-committed", "t", 3)
		if err != nil {
			t.Fatalf("offset fetch of a group without commits: %v; Kafka answers offset -1 and no error", err)
		}
		for p := range 3 {
			if off, ok := got[p]; !ok || off != -1 {
				t.Fatalf("offset fetch of a group without commits: %v; want -1 for partitions 0-2", got)
			}
		}
	}
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 10 * time.Second}
	cr, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: "committed", GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{"t": {{Partition: 1, Offset: 5}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range cr.Topics["t"] {
		if p.Error != nil {
			t.Fatalf("committing: %v", p.Error)
		}
	}
	got, err := devkafka.CommittedOffsets(ctx, addrs, "committed", "t", 3)
	if err != nil || got[1] != 5 || got[0] != -1 {
		t.Fatalf("offset fetch of a group that committed: %v, %v; want partition 1 at 5, 0 at -1", got, err)
	}
}
