package localstack

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// BrokerOptions describe the devbroker process.
type BrokerOptions struct {
	Name   string    // process and log file name
	Bin    string    // the devbroker binary
	LogDir string    // where NAME.log goes
	Stream io.Writer // if set, its output is copied here
	Args   []string  // its flags (a -data-dir makes it survive a restart)
}

// Broker is a running devbroker.
type Broker struct {
	o     BrokerOptions
	addrs []string

	mu sync.Mutex // held across a restart, so the cleanup stops the new process
	p  *proc.Process
}

// brokerReady is how long the broker has to print its addresses.
const brokerReady = 30 * time.Second

// StartBroker starts the broker (cl stops it) and waits for the BROKERS line
// with its addresses.
func StartBroker(ctx context.Context, cl *proc.Cleanup, o BrokerOptions) (*Broker, error) {
	p, err := proc.Start(o.Name, proc.Options{LogDir: o.LogDir, Stream: o.Stream}, o.Bin, o.Args...)
	if err != nil {
		return nil, err
	}
	b := &Broker{o: o, p: p}
	cl.Add(func() { b.mu.Lock(); b.p.Stop(5 * time.Second); b.mu.Unlock() })
	addr, err := p.WaitForLine(ctx, "BROKERS ", brokerReady)
	if err != nil {
		return nil, err
	}
	b.addrs = strings.Split(addr, ",")
	return b, nil
}

// Addrs are the broker's listen addresses.
func (b *Broker) Addrs() []string { return b.addrs }

// Restart kill -9s the broker and, after pause, starts it again with the same
// flags, appending to its log.
func (b *Broker) Restart(ctx context.Context, pause time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.p.Kill()
	Sleep(ctx, pause)
	p, err := proc.Start(b.o.Name, proc.Options{LogDir: b.o.LogDir, Stream: b.o.Stream, AppendLog: true}, b.o.Bin, b.o.Args...)
	if err != nil {
		return fmt.Errorf("restarting the broker: %w", err)
	}
	b.p = p
	if _, err := p.WaitForLine(ctx, "BROKERS ", brokerReady); err != nil {
		return fmt.Errorf("restarting the broker: %w", err)
	}
	return nil
}

// ReadPartition reads one partition of topic from its start to its current
// end, calling fn for each message.
func ReadPartition(ctx context.Context, brokers []string, topic string, partition int, fn func(kafka.Message)) error {
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, partition)
	if err != nil {
		return fmt.Errorf("reading %s/%d: %w", topic, partition, err)
	}
	last, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil {
		return fmt.Errorf("reading %s/%d end offset: %w", topic, partition, err)
	}
	if last == 0 {
		return nil
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partition, MaxWait: 100 * time.Millisecond, MaxBytes: 10 << 20})
	defer rd.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		m, err := rd.ReadMessage(rctx)
		if err != nil {
			return fmt.Errorf("reading %s/%d: %w", topic, partition, err)
		}
		fn(m)
		if m.Offset+1 >= last {
			return nil
		}
	}
}
