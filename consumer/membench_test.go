package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// TestBenchMemory measures the peak resident set (VmHWM) of cmd/consumer, a
// separate process with the sink none, draining a backlog on 8 partitions,
// for events of 10 KB, 100 KB and 1 MB: once with CONSUMER_MEMORY_LIMIT set to
// the operator's default container limit (256 MiB), once without (the
// baseline, unbounded as before the memory budget), on the same broker,
// database and records. Target: peak_vs_limit <= 0.8 for each size.
//
// It runs only with CONSUMER_BENCH_MEMORY=1 (BENCH=memory make bench):
//
//	CONSUMER_BENCH_MEMORY=1 go test ./consumer/ -run '^TestBenchMemory$' -count=1 -v -timeout 30m
//
// CONSUMER_BENCH_MEMORY_MIB sets the backlog per size (default 200 MiB). The
// last line is "RESULT key=value ...".
func TestBenchMemory(t *testing.T) {
	if os.Getenv("CONSUMER_BENCH_MEMORY") == "" {
		t.Skip("set CONSUMER_BENCH_MEMORY=1 to run the benchmark")
	}
	backlogMiB := 200
	if s := os.Getenv("CONSUMER_BENCH_MEMORY_MIB"); s != "" {
		backlogMiB, _ = strconv.Atoi(s)
	}
	const parts, limit = 8, 256 << 20
	ctx := context.Background()
	k := consumertest.NewKafka(t)
	dsn := consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	createTables(t, pool, dedup.Table{Interval: dedup.Daily})

	bin := filepath.Join(t.TempDir(), "consumer")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/consumer").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	sizes := []struct {
		name string
		size int
	}{{"10k", 10_000}, {"100k", 100_000}, {"1m", 1_000_000}}
	result := fmt.Sprintf("RESULT limit_mib=%d backlog_mib=%d partitions=%d", limit>>20, backlogMiB, parts)
	pass := true
	for _, sz := range sizes {
		topic := "mem" + sz.name
		createTopic(t, k, topic, parts, map[string]string{"max.message.bytes": strconv.Itoa(2 << 20)})
		k.MustCreateTopic(t, topic+".dlq", 1)
		n := max(backlogMiB<<20/sz.size, parts)
		produceBacklog(t, k, topic, parts, n, sz.size)
		t.Logf("%s: %d events of %d bytes on %d partitions", topic, n, sz.size, parts)

		basePeak, baseEPS := runConsumerPeak(t, bin, k.Brokers(), dsn, topic, "base-"+sz.name, parts, n, nil)
		peak, eps := runConsumerPeak(t, bin, k.Brokers(), dsn, topic, "limited-"+sz.name, parts, n,
			[]string{envvars.MemoryLimit + "=" + strconv.Itoa(limit)})
		ratio := peak / float64(limit>>20)
		if ratio > 0.8 {
			pass = false
		}
		t.Logf("%s: limited peak %.1f MiB (%.2f of the limit), %.0f events/s; baseline peak %.1f MiB, %.0f events/s",
			sz.name, peak, ratio, eps, basePeak, baseEPS)
		mibps := eps * float64(sz.size) / (1 << 20)
		result += fmt.Sprintf(" peak_mib_%s=%.1f peak_vs_limit_%s=%.2f eps_%s=%.0f mibps_%s=%.1f baseline_peak_mib_%s=%.1f baseline_eps_%s=%.0f eps_vs_baseline_%s=%.2f",
			sz.name, peak, sz.name, ratio, sz.name, eps, sz.name, mibps, sz.name, basePeak, sz.name, baseEPS, sz.name, eps/baseEPS)
		deleteTopics(t, k.Brokers(), topic, topic+".dlq") // the broker is in this process: free its memory
	}
	fmt.Println(result + " pass=" + strconv.FormatBool(pass))
	if !pass {
		t.Errorf("a peak exceeded 0.8 of the %d MiB limit", limit>>20)
	}
}

// produceBacklog writes n events of about size bytes, round-robin over parts.
func produceBacklog(t *testing.T, k *consumertest.Kafka, topic string, parts, n, size int) {
	t.Helper()
	w := consumertest.NewWriter(k.Brokers(), topic)
	w.BatchBytes = 3 << 19 // 1.5 MiB: under the topic's max.message.bytes, over one 1 MB event
	defer w.Close()
	pad := strings.Repeat("p", max(size-100, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var batch []kafka.Message
	flush := func() {
		if err := w.WriteMessages(ctx, batch...); err != nil {
			msg := err.Error()
			t.Fatalf("producing to %s: %s", topic, msg[:min(len(msg), 300)])
		}
		batch = batch[:0]
	}
	bytes := 0
	for i := range n {
		v := fmt.Sprintf(`{"eventId":%q,"type":"bench","pad":%q}`, uuid.Must(uuid.NewV7()), pad)
		batch = append(batch, kafka.Message{Partition: i % parts, Value: []byte(v)})
		if bytes += len(v); bytes >= 16<<20 {
			flush()
			bytes = 0
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

// runConsumerPeak runs cmd/consumer (sink none) over topic in a new group
// until the group committed every partition's end, and returns its peak
// resident set in MiB and its throughput in events per second.
func runConsumerPeak(t *testing.T, bin string, brokers []string, dsn, topic, group string, parts, n int, extraEnv []string) (float64, float64) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		envvars.Brokers+"="+strings.Join(brokers, ","),
		envvars.Topic+"="+topic, envvars.Group+"="+group,
		envvars.DatabaseURL+"="+dsn,
		envvars.Sink+"=none",
		envvars.ListenAddr+"=", envvars.LogLevel+"=warn",
	)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Logf("%s: %s", group, sc.Text())
		}
	}()
	t0 := time.Now()
	waitGroupDone(t, brokers, group, topic, parts, 10*time.Minute)
	el := time.Since(t0)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024, float64(n) / el.Seconds()
		}
	}
	t.Fatalf("no VmHWM in /proc status:\n%s", status)
	return 0, 0
}

func deleteTopics(t *testing.T, brokers []string, topics ...string) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second}
	if _, err := client.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: topics}); err != nil {
		t.Logf("deleting %v: %v", topics, err)
	}
}
