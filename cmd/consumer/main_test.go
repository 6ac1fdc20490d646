package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

// buildBinaries builds cmd/consumer and cmd/devbroker once per test binary.
var build struct {
	once sync.Once
	dir  string
	err  error
}

func binaries(t *testing.T) (consumerBin, brokerBin string) {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "consumer-bin-")
		if build.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", build.dir+"/", ".", "../devbroker")
		out, err := cmd.CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return filepath.Join(build.dir, "consumer"), filepath.Join(build.dir, "devbroker")
}

// proc is a child process with its output captured.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func start(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, _ := p.cmd.StdoutPipe()
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) waitLine(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, l := range strings.Split(p.output(), "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no line %q within %v; output:\n%s", prefix, d, p.output())
	return ""
}

// TestKill9 runs cmd/consumer as a separate process against cmd/devbroker
// (a separate broker process) and PostgreSQL, and kills it with SIGKILL
// several times mid-stream. Each restart gets the uncommitted batches again;
// the SQL sink's ledger ends with exactly one row per unique event id.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	consumerBin, brokerBin := binaries(t)
	broker := start(t, brokerBin, nil, "-topics", "payments:4,payments.dlq:1")
	addr := strings.TrimPrefix(broker.waitLine(t, "BROKERS ", 30*time.Second), "BROKERS ")
	brokers := strings.Split(addr, ",")

	dsn := consumertest.DatabaseURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	eng, err := dedup.NewEngine(pool, dedup.Table{})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Maintain(ctx, time.Now(), 2, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	// No unique key on purpose: a double effect shows as two rows.
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (event_id uuid NOT NULL, amount numeric NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	const total = 20000
	unique := map[uuid.UUID]bool{}
	var ids []uuid.UUID
	rng := rand.New(rand.NewPCG(3, 4))
	var msgs []kafka.Message
	for i := range total {
		var id uuid.UUID
		if len(ids) > 0 && rng.IntN(4) == 0 {
			id = ids[rng.IntN(len(ids))] // 25% duplicates, anywhere
		} else {
			id = uuid.Must(uuid.NewV7())
			ids = append(ids, id)
			unique[id] = true
		}
		msgs = append(msgs, kafka.Message{Partition: i % 4, Value: []byte(fmt.Sprintf(`{"eventId":%q,"amount":"%d.25"}`, id, i%100))})
	}
	w := consumertest.NewWriter(brokers, "payments")
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	port, err := consumertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"CONSUMER_BROKERS=" + addr,
		"CONSUMER_TOPIC=payments",
		"CONSUMER_GROUP=ledger",
		"CONSUMER_DATABASE_URL=" + dsn,
		"CONSUMER_SINK=sql",
		`CONSUMER_SINK_SQL_STATEMENT=INSERT INTO ledger (event_id, amount) VALUES ($1, ($2::jsonb->>'amount')::numeric)`,
		"CONSUMER_BATCH_MAX_MESSAGES=100",
		"CONSUMER_BATCH_MAX_WAIT=20ms",
		"CONSUMER_SESSION_TIMEOUT=2s",
		"CONSUMER_HEARTBEAT_INTERVAL=300ms",
		"CONSUMER_LISTEN_ADDR=127.0.0.1:" + strconv.Itoa(port),
		"CONSUMER_LOG_FORMAT=text",
	}
	rows := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, killAt := range []int{len(unique) / 5, len(unique) / 2, 4 * len(unique) / 5} {
		c := start(t, consumerBin, env)
		deadline := time.Now().Add(60 * time.Second)
		for rows() < killAt {
			if time.Now().After(deadline) {
				t.Fatalf("run %d: %d rows after 60s, waiting for %d; output:\n%s", i, rows(), killAt, c.output())
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-c.done
		t.Logf("run %d: killed with SIGKILL at %d ledger rows", i, rows())
	}

	// The last run goes to the end and is stopped with SIGTERM.
	c := start(t, consumerBin, env)
	waitReady(t, port, c)
	deadline := time.Now().Add(90 * time.Second)
	for !caughtUp(t, brokers) {
		if time.Now().After(deadline) {
			t.Fatalf("not caught up after 90s (%d rows); output:\n%s", rows(), c.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	metrics := get(t, port, "/metrics")
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30s after SIGTERM")
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM; output:\n%s", code, c.output())
	}
	if !strings.Contains(c.output(), "leaving consumer group") {
		t.Errorf("no group leave on SIGTERM; output:\n%s", c.output())
	}
	var n, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM ledger`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != len(unique) || distinct != len(unique) {
		t.Fatalf("ledger has %d rows, %d distinct ids; want %d (of %d records)", n, distinct, len(unique), total)
	}
	if !strings.Contains(metrics, "idempotent_consumer_duplicates_skipped_total") {
		t.Errorf("metrics endpoint lacks the duplicates counter")
	}
	if strings.Contains(c.output(), strings.Split(strings.Split(dsn, "@")[0], ":")[2]) {
		t.Errorf("the database password appears in the consumer's log")
	}
	t.Logf("%d records, %d unique ids, ledger rows %d", total, len(unique), n)
}

func get(t *testing.T, port int, path string) string {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func waitReady(t *testing.T, port int, c *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("/readyz not 200 within 30s; output:\n%s", c.output())
}

// caughtUp reports whether the group committed every partition's end.
func caughtUp(t *testing.T, brokers []string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	parts := []int{0, 1, 2, 3}
	co, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: "ledger", Topics: map[string][]int{"payments": parts}})
	if err != nil {
		return false
	}
	var reqs []kafka.OffsetRequest
	for _, p := range parts {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	lo, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{"payments": reqs}})
	if err != nil {
		return false
	}
	end := map[int]int64{}
	for _, p := range lo.Topics["payments"] {
		end[p.Partition] = p.LastOffset
	}
	for _, p := range co.Topics["payments"] {
		if p.CommittedOffset != end[p.Partition] {
			return false
		}
	}
	return len(co.Topics["payments"]) == len(parts)
}
