package main

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
	"github.com/idempotency-dev/operator/hack/internal/proc"
	"github.com/idempotency-dev/operator/internal/devkafka"
)

// fleet is the set of consumer processes of one group.
type fleet struct {
	prefix      string // process (and log file) names: prefix-1, prefix-2, ...
	group       string
	bin, logDir string
	stream      io.Writer
	env         []string
	// args follow the binary (the relays' `outbox-relay`); topic is the
	// group's topic for the lag (default: the chaos topic).
	args  []string
	topic string

	mu      sync.Mutex
	seq     int
	running []*proc.Process
	addrs   map[*proc.Process]string // each process's /metrics address
}

func newFleet(prefix, group, bin, logDir string, stream io.Writer, env []string) *fleet {
	return &fleet{prefix: prefix, group: group, bin: bin, logDir: logDir, stream: stream, env: env}
}

func (f *fleet) start() error {
	f.mu.Lock()
	f.seq++
	name := f.prefix + "-" + strconv.Itoa(f.seq)
	f.mu.Unlock()
	c, err := localstack.StartConsumer(name, proc.Options{LogDir: f.logDir, Stream: f.stream, Env: append([]string{}, f.env...)}, f.bin, f.args...)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.running = append(f.running, c.Process)
	if f.addrs == nil {
		f.addrs = map[*proc.Process]string{}
	}
	f.addrs[c.Process] = c.Addr
	f.mu.Unlock()
	return nil
}

// startN starts n more consumers.
func (f *fleet) startN(n int) error {
	for range n {
		if err := f.start(); err != nil {
			return err
		}
	}
	return nil
}

// fillTo starts consumers until n are running.
func (f *fleet) fillTo(n int) error {
	for f.alive() < n {
		if err := f.start(); err != nil {
			return err
		}
	}
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

// killPid kill -9s the running consumer with process id pid and returns its
// name ("" when none has it).
func (f *fleet) killPid(pid int) string {
	f.mu.Lock()
	var p *proc.Process
	for i, c := range f.running {
		if c.Pid() == pid {
			p = c
			f.running = append(f.running[:i], f.running[i+1:]...)
			break
		}
	}
	f.mu.Unlock()
	if p == nil {
		return ""
	}
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
// end of every partition; a consumer that exits on its own fails it.
func (f *fleet) waitForLagZero(ctx context.Context, brokers []string, partitions int, timeout time.Duration) error {
	t := f.topicName()
	err := localstack.WaitForLagZero(ctx, brokers, f.group, t, partitions, timeout, f.crashed)
	if err == nil {
		return nil
	}
	// A group that stops making progress is a defect to find: say what each
	// running consumer was doing last, and where its goroutines were.
	var b strings.Builder
	// Where each partition stands: a stable offset below the end is a
	// transaction the broker never ended, which holds a read_committed
	// group back for good.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	fmt.Fprintf(&b, "\n--- partitions:\n%s", devkafka.Offsets(octx, brokers, f.group, t, partitions))
	cancel()
	f.mu.Lock()
	for _, p := range f.running {
		fmt.Fprintf(&b, "\n--- last lines of %s:\n%s", p.Name, p.TailLog(40))
		dump := strings.Split(p.Goroutines(3*time.Second), "\n")
		if len(dump) > 150 {
			dump = append(dump[:150], "  ...")
		}
		fmt.Fprintf(&b, "\n--- goroutines of %s (SIGQUIT):\n%s", p.Name, strings.Join(dump, "\n"))
	}
	f.mu.Unlock()
	return fmt.Errorf("%w%s", err, b.String())
}

// topicName is the group's topic.
func (f *fleet) topicName() string {
	if f.topic != "" {
		return f.topic
	}
	return topic
}

// httpConsumerEnv is the HTTP group's environment: the http sink (an external
// handler, Key ordering and 64 in flight by default) posting to the provider.
func httpConsumerEnv(brokers []string, dbURL, providerURL string, timeout time.Duration) []string {
	var env []string
	for _, kv := range consumerEnv(brokers, dbURL) {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case envvars.Group, envvars.DeadLetterTopic, envvars.Sink, envvars.SinkSQLStatement, envvars.ClientID:
		default:
			env = append(env, kv)
		}
	}
	return append(env,
		envvars.Group+"="+httpGroup,
		envvars.DeadLetterTopic+"="+httpDLQTopic,
		envvars.ClientID+"="+httpApp,
		envvars.Sink+"=http",
		envvars.SinkHTTPURL+"="+providerURL,
		envvars.SinkHTTPTimeout+"="+timeout.String(),
	)
}

// claimClientEnv is the claim clients' environment (hack/chaos/claimclient):
// the names a service reads from the IdempotentConsumer's application Secret
// (claimFunction) and its own settings.
func claimClientEnv(brokers []string, dbURL, claimFunction, stallFile string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"CLAIM_BROKERS=" + strings.Join(brokers, ","),
		"CLAIM_TOPIC=" + topic,
		"CLAIM_GROUP=" + claimGroup,
		"CLAIM_DATABASE_URL=" + dbURL,
		"DEDUP_CLAIM_FUNCTION=" + claimFunction,
		"CLAIM_LEDGER_TABLE=claim_ledger",
		"CLAIM_STALL_FILE=" + stallFile,
	}
}

func consumerEnv(brokers []string, dbURL string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		envvars.Brokers + "=" + strings.Join(brokers, ","),
		envvars.Topic + "=" + topic,
		envvars.Group + "=" + group,
		envvars.ClientID + "=" + sqlApp,
		envvars.DeadLetterTopic + "=" + dlqTopic,
		envvars.DatabaseURL + "=" + dbURL,
		envvars.Sink + "=sql",
		envvars.SinkSQLStatement + "=" + ledgerStatement,
		envvars.SessionTimeout + "=2s",
		envvars.HeartbeatInterval + "=200ms",
		envvars.RebalanceTimeout + "=4s",
		envvars.BatchMaxMessages + "=200",
		envvars.BatchMaxWait + "=20ms",
		envvars.RetryBackoffMax + "=1s",
		envvars.LogLevel + "=info",
	}
}
