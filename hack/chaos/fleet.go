package main

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// fleet is the set of consumer processes.
type fleet struct {
	bin, logDir string
	stream      io.Writer
	env         []string

	mu      sync.Mutex
	seq     int
	running []*proc.Process
}

func newFleet(bin, logDir string, stream io.Writer, env []string) *fleet {
	return &fleet{bin: bin, logDir: logDir, stream: stream, env: env}
}

func (f *fleet) start() error {
	port, err := consumertest.FreePort()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.seq++
	name := "consumer-" + strconv.Itoa(f.seq)
	f.mu.Unlock()
	env := append(append([]string{}, f.env...), envvars.ListenAddr+"=127.0.0.1:"+strconv.Itoa(port))
	p, err := proc.Start(name, proc.Options{LogDir: f.logDir, Stream: f.stream, Env: env}, f.bin)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.running = append(f.running, p)
	f.mu.Unlock()
	return nil
}

// killRandom kill -9s one running consumer and returns its name.
func (f *fleet) killRandom(rng *mrand.Rand) string {
	f.mu.Lock()
	f.prune()
	if len(f.running) == 0 {
		f.mu.Unlock()
		return "(none running)"
	}
	i := rng.IntN(len(f.running))
	p := f.running[i]
	f.running = append(f.running[:i], f.running[i+1:]...)
	f.mu.Unlock()
	p.Kill()
	return p.Name
}

// prune forgets processes that exited on their own; the caller holds mu.
func (f *fleet) prune() {
	out := f.running[:0]
	for _, p := range f.running {
		if !p.Exited() {
			out = append(out, p)
		}
	}
	f.running = out
}

func (f *fleet) alive() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prune()
	return len(f.running)
}

// crashed returns a consumer that exited without being killed, if any.
func (f *fleet) crashed() *proc.Process {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.running {
		if p.Exited() {
			return p
		}
	}
	return nil
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	ps := f.running
	f.running = nil
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { p.Stop(20 * time.Second) })
	}
	wg.Wait()
}

// offsetSnapshot is the group's committed offsets at one instant.
type offsetSnapshot struct {
	at      time.Time
	offsets map[int]int64
}

func snapshotOffsets(ctx context.Context, cl *kafka.Client, partitions int) (offsetSnapshot, error) {
	// The instant is taken before the request: anything committed in the
	// database before the broker recorded these offsets is before "at" too.
	at := time.Now()
	parts := make([]int, partitions)
	for i := range parts {
		parts[i] = i
	}
	resp, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return offsetSnapshot{}, err
	}
	if resp.Error != nil {
		return offsetSnapshot{}, resp.Error
	}
	s := offsetSnapshot{at: at, offsets: map[int]int64{}}
	for _, p := range resp.Topics[topic] {
		if p.Error == nil && p.CommittedOffset >= 0 {
			s.offsets[p.Partition] = p.CommittedOffset
		}
	}
	return s, nil
}

// waitForLagZero waits until the committed offsets reach the end of every partition.
func waitForLagZero(ctx context.Context, brokers []string, partitions int, timeout time.Duration, f *fleet) error {
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second}
	deadline := time.Now().Add(timeout)
	lag := int64(-1)
	for time.Now().Before(deadline) {
		if p := f.crashed(); p != nil {
			return fmt.Errorf("consumer %s exited on its own: %v\n%s", p.Name, p.Err(), p.TailLog(30))
		}
		ends, err := endOffsets(ctx, cl, partitions)
		if err == nil {
			s, err := snapshotOffsets(ctx, cl, partitions)
			if err == nil {
				lag = 0
				for p, end := range ends {
					if d := end - s.offsets[p]; d > 0 {
						lag += d
					}
				}
				if lag == 0 {
					return nil
				}
			}
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("consumer lag still %d after %s", lag, timeout)
}

func endOffsets(ctx context.Context, cl *kafka.Client, partitions int) (map[int]int64, error) {
	var reqs []kafka.OffsetRequest
	for p := range partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	resp, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, p.Error
		}
		out[p.Partition] = p.LastOffset
	}
	return out, nil
}
