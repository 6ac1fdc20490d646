package main

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// fleet is the set of consumer processes of one group.
type fleet struct {
	prefix      string // process (and log file) names: prefix-1, prefix-2, ...
	group       string
	bin, logDir string
	stream      io.Writer
	env         []string

	mu      sync.Mutex
	seq     int
	running []*proc.Process
}

func newFleet(prefix, group, bin, logDir string, stream io.Writer, env []string) *fleet {
	return &fleet{prefix: prefix, group: group, bin: bin, logDir: logDir, stream: stream, env: env}
}

func (f *fleet) start() error {
	port, err := consumertest.FreePort()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.seq++
	name := f.prefix + "-" + strconv.Itoa(f.seq)
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
	asked   time.Time // when the request was sent
	offsets map[int]int64
}

func snapshotOffsets(ctx context.Context, brokers []string, group string, partitions int) (offsetSnapshot, error) {
	// The instant is taken when the answer is in: the broker recorded these
	// offsets before it answered, and each was committed only after its
	// events were in the database, so they were durable by then. (The
	// instant before the request is too early: an offset committed while
	// the request was on its way is in the answer too.)
	asked := time.Now()
	offs, err := consumertest.CommittedOffsets(ctx, brokers, group, topic, partitions)
	if err != nil {
		return offsetSnapshot{}, err
	}
	s := offsetSnapshot{at: time.Now(), asked: asked, offsets: map[int]int64{}}
	for p, o := range offs {
		if o >= 0 {
			s.offsets[p] = o
		}
	}
	return s, nil
}

// waitForLagZero waits until the fleet's group's committed offsets reach the
// end of every partition.
func waitForLagZero(ctx context.Context, brokers []string, partitions int, timeout time.Duration, f *fleet) error {
	deadline := time.Now().Add(timeout)
	lag := int64(-1)
	for time.Now().Before(deadline) {
		if p := f.crashed(); p != nil {
			return fmt.Errorf("consumer %s exited on its own: %w\n%s", p.Name, p.ExitErr(), p.TailLog(30))
		}
		if l, err := consumertest.GroupLag(ctx, brokers, f.group, topic, partitions); err == nil {
			if lag = l; lag == 0 {
				return nil
			}
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("group %s: consumer lag still %d after %s", f.group, lag, timeout)
}
