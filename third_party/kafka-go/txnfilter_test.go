package kafka

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// testBatch is a v2 record batch for a hand-made fetch response.
type testBatch struct {
	base    int64
	pid     int64 // -1: not transactional
	control bool
	commit  bool     // for a control batch: commit (true) or abort marker
	values  []string // one record each; ignored for control batches
}

func (b testBatch) encode() []byte {
	var attrs int16
	if b.pid >= 0 {
		attrs |= transactionalBatch
	}
	var records [][2][]byte // key, value
	if b.control {
		attrs |= controlBatch
		typ := byte(0)
		if b.commit {
			typ = 1
		}
		records = append(records, [2][]byte{{0, 0, 0, typ}, {0, 0, 0, 0, 0, 0}})
	} else {
		for _, v := range b.values {
			records = append(records, [2][]byte{nil, []byte(v)})
		}
	}
	var recs []byte
	for i, kv := range records {
		var r []byte
		r = append(r, 0)                     // attributes
		r = binary.AppendVarint(r, 0)        // timestamp delta
		r = binary.AppendVarint(r, int64(i)) // offset delta
		r = appendVarBytes(r, kv[0])         // key
		r = appendVarBytes(r, kv[1])         // value
		r = binary.AppendVarint(r, 0)        // header count
		recs = binary.AppendVarint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	var h []byte
	h = binary.BigEndian.AppendUint32(h, 0)                      // partition leader epoch
	h = append(h, 2)                                             // magic
	h = binary.BigEndian.AppendUint32(h, 0)                      // crc (not checked)
	h = binary.BigEndian.AppendUint16(h, uint16(attrs))          // attributes
	h = binary.BigEndian.AppendUint32(h, uint32(len(records)-1)) // last offset delta
	h = binary.BigEndian.AppendUint64(h, 0)                      // first timestamp
	h = binary.BigEndian.AppendUint64(h, 0)                      // max timestamp
	h = binary.BigEndian.AppendUint64(h, uint64(b.pid))          // producer id
	h = binary.BigEndian.AppendUint16(h, 0)                      // producer epoch
	h = binary.BigEndian.AppendUint32(h, 0)                      // base sequence
	h = binary.BigEndian.AppendUint32(h, uint32(len(records)))   // record count
	var out []byte
	out = binary.BigEndian.AppendUint64(out, uint64(b.base))
	out = binary.BigEndian.AppendUint32(out, uint32(len(h)+len(recs)))
	return append(append(out, h...), recs...)
}

func appendVarBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	return append(binary.AppendVarint(b, int64(len(v))), v...)
}

// fetchResponseV10 encodes a one-partition fetch response v10 around records.
func fetchResponseV10(hwm int64, aborted []abortedTransaction, records []byte) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint32(b, 0) // throttle
	b = binary.BigEndian.AppendUint16(b, 0) // error code
	b = binary.BigEndian.AppendUint32(b, 0) // session id
	b = binary.BigEndian.AppendUint32(b, 1) // topics
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 't')
	b = binary.BigEndian.AppendUint32(b, 1) // partitions
	b = binary.BigEndian.AppendUint32(b, 0) // partition
	b = binary.BigEndian.AppendUint16(b, 0) // error code
	b = binary.BigEndian.AppendUint64(b, uint64(hwm))
	b = binary.BigEndian.AppendUint64(b, uint64(hwm)) // last stable offset
	b = binary.BigEndian.AppendUint64(b, 0)           // log start offset
	b = binary.BigEndian.AppendUint32(b, uint32(len(aborted)))
	for _, a := range aborted {
		b = binary.BigEndian.AppendUint64(b, uint64(a.ProducerID))
		b = binary.BigEndian.AppendUint64(b, uint64(a.FirstOffset))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)))
	return append(b, records...)
}

// readAllFromResponse reads a fetch response the way Conn.ReadBatchWith does
// and returns the values read and the offset the Batch resumes at.
func readAllFromResponse(t *testing.T, resp []byte, level IsolationLevel) (values []string, offsets []int64, next int64) {
	t.Helper()
	r := bufio.NewReader(bytes.NewReader(resp))
	_, _, remain, aborted, err := readFetchResponseHeaderV10(r, len(resp))
	if err != nil {
		t.Fatalf("reading the response header: %v", err)
	}
	msgs, err := newMessageSetReader(r, remain)
	if err != nil {
		t.Fatalf("reading the first batch header: %v", err)
	}
	if level == ReadCommitted {
		msgs.aborted = newAbortedTxns(aborted)
	}
	batch := &Batch{msgs: msgs}
	for {
		m, err := batch.ReadMessage()
		if errors.Is(err, io.EOF) {
			return values, offsets, batch.Offset()
		}
		if err != nil {
			t.Fatalf("reading a message: %v", err)
		}
		values = append(values, string(m.Value))
		offsets = append(offsets, m.Offset)
	}
}

// A log with interleaved transactions of two producers: pid 1 aborts at 1-2,
// commits at 6, aborts at 8; pid 2 commits at 3 and aborts at 11; plain
// records at 0 and 9; the response ends with an abort marker.
func txnTestLog() ([]testBatch, []abortedTransaction) {
	batches := []testBatch{
		{base: 0, pid: -1, values: []string{"p0"}},
		{base: 1, pid: 1, values: []string{"a1", "a2"}},
		{base: 3, pid: 2, values: []string{"b1"}},
		{base: 4, pid: 1, control: true},
		{base: 5, pid: 2, control: true, commit: true},
		{base: 6, pid: 1, values: []string{"a3"}},
		{base: 7, pid: 1, control: true, commit: true},
		{base: 8, pid: 1, values: []string{"a4"}},
		{base: 9, pid: -1, values: []string{"p1"}},
		{base: 10, pid: 1, control: true},
		{base: 11, pid: 2, values: []string{"b2"}},
		{base: 12, pid: 2, control: true},
	}
	// Unordered, as a broker may send them.
	aborted := []abortedTransaction{{ProducerID: 1, FirstOffset: 8}, {ProducerID: 2, FirstOffset: 11}, {ProducerID: 1, FirstOffset: 1}}
	return batches, aborted
}

func TestReadCommittedHidesAbortedTransactionsAndMarkers(t *testing.T) {
	batches, aborted := txnTestLog()
	var records []byte
	for _, b := range batches {
		records = append(records, b.encode()...)
	}
	resp := fetchResponseV10(13, aborted, records)

	for _, tc := range []struct {
		level   IsolationLevel
		values  []string
		offsets []int64
	}{
		{ReadCommitted, []string{"p0", "b1", "a3", "p1"}, []int64{0, 3, 6, 9}},
		// Aborted records are visible at ReadUncommitted; markers never are.
		{ReadUncommitted, []string{"p0", "a1", "a2", "b1", "a3", "a4", "p1", "b2"}, []int64{0, 1, 2, 3, 6, 8, 9, 11}},
	} {
		values, offsets, next := readAllFromResponse(t, resp, tc.level)
		if !equalSlices(values, tc.values) || !equalSlices(offsets, tc.offsets) {
			t.Errorf("isolation %d: read %q at %v, want %q at %v", tc.level, values, offsets, tc.values, tc.offsets)
		}
		// The hidden batches at the end are consumed: the next fetch starts
		// after them rather than fetching them again.
		if next != 13 {
			t.Errorf("isolation %d: the batch resumes at %d, want 13", tc.level, next)
		}
	}
}

func TestReadCommittedResponseOfOnlyHiddenBatches(t *testing.T) {
	batches, aborted := txnTestLog()
	var records []byte
	for _, b := range batches[10:] { // the aborted b2 and its marker
		records = append(records, b.encode()...)
	}
	values, _, next := readAllFromResponse(t, fetchResponseV10(13, aborted, records), ReadCommitted)
	if len(values) != 0 || next != 13 {
		t.Errorf("read %q, resuming at %d; want nothing, resuming at 13", values, next)
	}
}

func TestReadCommittedTruncatedAbortedBatch(t *testing.T) {
	batches, aborted := txnTestLog()
	var records []byte
	for _, b := range batches[8:11] { // p1, an abort marker, the aborted b2...
		records = append(records, b.encode()...)
	}
	records = records[:len(records)-3] // ...cut short by MaxBytes
	values, _, next := readAllFromResponse(t, fetchResponseV10(13, aborted, records), ReadCommitted)
	if !equalSlices(values, []string{"p1"}) || next != 12 {
		t.Errorf("read %q, resuming at %d; want [p1], resuming at 12", values, next)
	}
	// A visible batch cut short is fetched again from its start, after the
	// marker before it.
	values, _, next = readAllFromResponse(t, fetchResponseV10(13, aborted, records), ReadUncommitted)
	if !equalSlices(values, []string{"p1"}) || next != 11 {
		t.Errorf("ReadUncommitted: read %q, resuming at %d; want [p1], resuming at 11", values, next)
	}
}

func equalSlices[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
