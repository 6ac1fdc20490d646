package consumertest

import "github.com/idempotency-dev/operator/internal/syncbuf"

// SyncBuffer is a goroutine-safe io.Writer that keeps everything written to
// it: a log sink for tests that assert on (or dump) what a component logged.
type SyncBuffer = syncbuf.Buffer
