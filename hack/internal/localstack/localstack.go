// Package localstack is the local stack the demo and the chaos harness share:
// a throwaway PostgreSQL with one database, the standalone Kafka-protocol
// broker (cmd/devbroker) as a process that can be killed and restarted,
// consumer processes each on their own listen port, the wait for a group's
// lag to reach zero, reading a topic back, and the scan of the processes'
// logs for a secret. The processes themselves are hack/internal/proc's.
package localstack

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// Steps returns a progress printer writing "NAME [  1.2s] message" lines to
// w, timed from the call.
func Steps(w io.Writer, name string) func(format string, args ...any) {
	started := time.Now()
	return func(format string, args ...any) {
		fmt.Fprintf(w, "%s [%5.1fs] %s\n", name, time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
}

// Root returns root, or, when it is empty, the module root above the working
// directory.
func Root(root string) (string, error) {
	if root != "" {
		return root, nil
	}
	return proc.FindRoot()
}

// Sleep waits d or until ctx ends; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
