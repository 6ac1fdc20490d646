package main

import (
	"github.com/idempotency-dev/operator/hack/internal/localstack"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// firstExited returns a consumer that exited, if any.
func firstExited(consumers []*localstack.Consumer) *proc.Process {
	for _, c := range consumers {
		if c.Exited() {
			return c.Process
		}
	}
	return nil
}
