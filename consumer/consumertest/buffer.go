package consumertest

import (
	"bytes"
	"sync"
)

// SyncBuffer is a goroutine-safe io.Writer that keeps everything written to
// it: a log sink for tests that assert on (or dump) what a component logged.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
