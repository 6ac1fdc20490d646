package deadletter

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// sizeCases are records of the shapes dead letters take: nil and empty keys
// and values, headers with short and long (multi-byte varint) lengths.
func sizeCases() []kafka.Message {
	long := bytes.Repeat([]byte("v"), 70000)
	hs := []kafka.Header{{Key: "dlq-reason", Value: []byte("handler_failed")}, {Key: "dlq-error", Value: bytes.Repeat([]byte("e"), 1024)}, {Key: "empty"}}
	return []kafka.Message{
		{},
		{Key: []byte{}, Value: []byte{}},
		{Key: []byte("k"), Value: []byte("v")},
		{Value: long},
		{Key: bytes.Repeat([]byte("k"), 200), Value: long[:300], Headers: hs},
		{Headers: []kafka.Header{{Key: strings.Repeat("h", 130), Value: long[:20000]}}},
		{Key: []byte("order-17"), Value: long[:5000], Headers: append(hs, hs...)},
	}
}

// TestRecordSizeMatchesKafkaGo: recordSize is exactly what kafka-go's writer
// counts against BatchBytes (its local MessageTooLargeError fires one byte
// below it, not at it).
func TestRecordSizeMatchesKafkaGo(t *testing.T) {
	for i, m := range sizeCases() {
		n := recordSize(m)
		for _, tt := range []struct {
			batchBytes int64
			tooLarge   bool
		}{{n, false}, {n - 1, true}} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			// Nothing listens on port 1: a record within BatchBytes fails
			// to connect instead.
			w := &kafka.Writer{Addr: kafka.TCP("127.0.0.1:1"), Topic: "t", BatchBytes: tt.batchBytes, MaxAttempts: 1}
			err := w.WriteMessages(ctx, m)
			cancel()
			_ = w.Close()
			var local kafka.MessageTooLargeError
			if errors.As(err, &local) != tt.tooLarge {
				t.Errorf("case %d: BatchBytes %d (recordSize %d): err %v, want MessageTooLargeError %v", i, tt.batchBytes, n, err, tt.tooLarge)
			}
		}
	}
}

// TestBatchFitsLimit: a v2 record batch of dead letters (Time zero, up to the
// writer's BatchSize records) encodes to at most recordBatchOverhead plus the
// sum of recordSize, the bound batchBytes relies on.
func TestBatchFitsLimit(t *testing.T) {
	cases := sizeCases()
	for _, n := range []int{1, 7, 100} {
		records := make([]protocol.Record, n)
		bound := int64(recordBatchOverhead)
		for i := range records {
			m := cases[i%len(cases)]
			hs := make([]protocol.Header, len(m.Headers))
			for j, h := range m.Headers {
				hs[j] = protocol.Header(h)
			}
			records[i] = protocol.Record{Key: protocol.NewBytes(m.Key), Value: protocol.NewBytes(m.Value), Headers: hs}
			bound += recordSize(m)
		}
		rs := &protocol.RecordSet{Version: 2, Records: protocol.NewRecordReader(records...)}
		var buf bytes.Buffer
		written, err := rs.WriteTo(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if got := written - 4; got > bound { // WriteTo prefixes the batch with its 4-byte size
			t.Errorf("%d records: encoded batch of %d bytes, more than the bound %d", n, got, bound)
		} else {
			t.Logf("%d records: encoded %d bytes, bound %d", n, got, bound)
		}
	}
}
