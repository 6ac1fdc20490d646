package localstack

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// Consumer is a cmd/consumer process and the address of its health and
// metrics endpoints.
type Consumer struct {
	*proc.Process
	Addr string
}

// StartConsumer starts the consumer binary with o.Env (nil: the parent's)
// and its listen address set to a free local port: Pods each have their own
// network namespace, local processes share one, so each gets its own port.
func StartConsumer(name string, o proc.Options, bin string, args ...string) (*Consumer, error) {
	port, err := consumertest.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	o.Env = SetEnv(env, envvars.ListenAddr, addr)
	p, err := proc.Start(name, o, bin, args...)
	if err != nil {
		return nil, err
	}
	return &Consumer{Process: p, Addr: addr}, nil
}

// SetEnv returns env with name set to value (any earlier setting dropped).
func SetEnv(env []string, name, value string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// WaitForLagZero waits until group's committed offsets reach the end of
// every partition of topic. It fails early when exited (polled) returns a
// consumer that exited on its own.
func WaitForLagZero(ctx context.Context, brokers []string, group, topic string, partitions int, timeout time.Duration, exited func() *proc.Process) error {
	deadline := time.Now().Add(timeout)
	lag := int64(-1)
	for time.Now().Before(deadline) {
		if p := exited(); p != nil {
			return fmt.Errorf("consumer %s exited on its own: %w\n%s", p.Name, p.ExitErr(), p.TailLog(30))
		}
		if l, err := consumertest.GroupLag(ctx, brokers, group, topic, partitions); err == nil {
			if lag = l; lag == 0 {
				return nil
			}
		}
		if !Sleep(ctx, 250*time.Millisecond) {
			return fmt.Errorf("group %s: consumer lag still %d: %w", group, lag, ctx.Err())
		}
	}
	return fmt.Errorf("group %s: consumer lag still %d after %s", group, lag, timeout)
}
