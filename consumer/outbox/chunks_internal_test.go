package outbox

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestChunks_NeverSplitAPartitionsShareWithinACall: a page with the rows
// read ahead of it is published in calls, in order, each at most the
// writer's batch count and batch bytes (by messageSize, above kafka-go's
// own reckoning), so kafka-go makes one
// record batch of each partition's share of a call. Handed over in one
// call, a share over the writer's BatchBytes was split into record batches
// sent one after another, and a failure of the first did not stop the
// second: a key's later event could be appended before its earlier one.
func TestChunks_NeverSplitAPartitionsShareWithinACall(t *testing.T) {
	var msgs []kafka.Message
	for i := range 50 {
		msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprintf("k%d", i%3)), Value: bytes.Repeat([]byte{'x'}, 100+i*37),
			Headers: []kafka.Header{{Key: "eventId", Value: []byte(fmt.Sprintf("%036d", i))}}})
	}
	msgs = append(msgs, kafka.Message{Key: []byte("big"), Value: bytes.Repeat([]byte{'y'}, 5000)}) // larger than a chunk alone
	const maxCount, maxBytes = 7, 2000
	cs := chunks(msgs, maxCount, maxBytes)
	var joined []kafka.Message
	for i, c := range cs {
		if len(c) == 0 || len(c) > maxCount {
			t.Fatalf("chunk %d has %d messages (at most %d)", i, len(c), maxCount)
		}
		var n int64
		for _, m := range c {
			n += messageSize(m)
		}
		if n > maxBytes && len(c) > 1 {
			t.Errorf("chunk %d: %d messages of %d bytes (at most %d, or one message)", i, len(c), n, maxBytes)
		}
		joined = append(joined, c...)
	}
	if len(joined) != len(msgs) {
		t.Fatalf("chunks hold %d messages, want %d", len(joined), len(msgs))
	}
	for i := range msgs {
		if !bytes.Equal(joined[i].Value, msgs[i].Value) || !bytes.Equal(joined[i].Key, msgs[i].Key) {
			t.Fatalf("message %d out of order in the chunks", i)
		}
	}
	if len(cs) < 2 || len(cs[len(cs)-1]) != 1 {
		t.Errorf("the oversized last message should be a chunk of its own: %d chunks, last %d", len(cs), len(cs[len(cs)-1]))
	}
	if got := chunks(nil, maxCount, maxBytes); len(got) != 0 {
		t.Errorf("chunks of nothing: %d", len(got))
	}
}
