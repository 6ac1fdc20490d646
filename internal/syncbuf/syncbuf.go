// Package syncbuf holds a goroutine-safe buffer for captured output: test
// logs (consumer/consumertest re-exports it as SyncBuffer) and the stdout of
// the child processes hack/internal/proc runs, which is why it lives outside
// the test harness.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a goroutine-safe io.Writer that keeps everything written to it.
// The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
