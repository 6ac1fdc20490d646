package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// deleteRecordsBefore moves partition p's log start to offset, as the
// topic's retention does.
func (e *env) deleteRecordsBefore(t testing.TB, p int32, offset int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = e.topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = p, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("deleting records of %s/%d before %d: %v", rt.Topic, rp.Partition, offset, err)
			}
			if rp.LowWatermark != offset {
				t.Fatalf("log start of %s/%d is %d after deleting records, want %d", rt.Topic, rp.Partition, rp.LowWatermark, offset)
			}
		}
	}
}

// TestStartBeforeLogStartCountsLostRecords: a consumer down longer than the
// topic's retention restarts from positions before the log start. The
// records in between are gone: the start counts them in
// records_lost_to_retention_total and logs an error naming the topic,
// partition and offsets, whichever of Kafka's committed offset and the
// database's position it starts from.
func TestStartBeforeLogStartCountsLostRecords(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup string // SQL run while the consumer is down
		lost  int    // log start 15
	}{
		{name: "committed and database at 10", lost: 5},
		// The database is ahead (a crash between the transaction and the
		// offset commit): records 10 and 11 took effect.
		{name: "database ahead at 12", setup: `UPDATE processed_event_offsets SET next_offset = 12`, lost: 3},
		// The database is behind (a failover lost batches): from 8.
		{name: "database behind at 8", setup: `UPDATE processed_event_offsets SET next_offset = 8`, lost: 7},
		{name: "no database position", setup: `DELETE FROM processed_event_offsets`, lost: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.dumpLogsOnFailure(t)
			ctx := context.Background()
			produceIDs(t, e, 10)
			a := e.start(e.config(), nil)
			e.waitCaughtUp(t, 30*time.Second)
			if err := a.stop(t); err != nil {
				t.Fatal(err)
			}
			// Down longer than the retention: 10 more records, of which
			// the topic's retention deletes the first 5.
			later := produceIDs(t, e, 10)
			e.deleteRecordsBefore(t, 0, 15)
			if tc.setup != "" {
				if _, err := e.pool.Exec(ctx, tc.setup); err != nil {
					t.Fatal(err)
				}
			}

			b := e.start(e.config(), nil)
			e.waitCaughtUp(t, 30*time.Second)
			if n := e.effectsOf(t, later[5:]); n != 5 {
				t.Fatalf("%d effects of the 5 records after the log start, want 5", n)
			}
			if n := metricValue(t, scrape(t, b.c), "idempotent_consumer_records_lost_to_retention_total"); n != tc.lost {
				t.Fatalf("records_lost_to_retention_total = %d, want %d", n, tc.lost)
			}
			var line string
			for l := range strings.Lines(e.logBuf.String()) {
				if strings.Contains(l, "level=ERROR") && strings.Contains(l, "records lost") {
					line = l
				}
			}
			for _, want := range []string{"topic=" + e.topic, "partition=0", "logStart=15", fmt.Sprintf("records=%d", tc.lost)} {
				if !strings.Contains(line, want) {
					t.Fatalf("no error log line with %q about the lost records (last: %q)", want, line)
				}
			}
		})
	}
}
