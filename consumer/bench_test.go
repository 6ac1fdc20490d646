package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestBench compares, in one run on the same broker, database and events:
//
//	(a) this runtime against the per-message pattern (one transaction and one
//	    synchronous offset commit per message), target >= 10x;
//	(b) this runtime against the same pipeline without the dedup insert,
//	    target >= 0.8x;
//	(c) a stream with 50% duplicates against an all-unique one, target >= 1.0x;
//	and the peak RSS of cmd/consumer (a separate process) consuming the
//	stream, target <= 64 MiB.
//
// It runs only with CONSUMER_BENCH=1 (make bench):
//
//	CONSUMER_BENCH=1 go test ./consumer/ -run '^TestBench$' -count=1 -v -timeout 30m
//
// CONSUMER_BENCH_EVENTS sets the stream length (default 20000),
// CONSUMER_BENCH_ROUNDS the rounds of the in-process variants (default 5,
// medians reported). The last line
// is "RESULT key=value ...".
func TestBench(t *testing.T) {
	if os.Getenv("CONSUMER_BENCH") == "" {
		t.Skip("set CONSUMER_BENCH=1 to run the benchmark")
	}
	n := 20000
	if s := os.Getenv("CONSUMER_BENCH_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	const parts = 4
	ctx := context.Background()
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "unique", parts)
	k.MustCreateTopic(t, "unique.dlq", 1)
	k.MustCreateTopic(t, "dup50", parts)
	k.MustCreateTopic(t, "dup50.dlq", 1)
	dsn := consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	createTables(t, pool, dedup.Table{Interval: dedup.Daily})
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (event_id uuid NOT NULL, amount numeric NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const stmt = `INSERT INTO ledger (event_id, amount) VALUES ($1, ($2::jsonb->>'amount')::numeric)`
	handler, err := sink.SQL(sink.SQLConfig{Statement: stmt})
	if err != nil {
		t.Fatal(err)
	}

	// Streams: "unique" has n distinct ids. "dup50" has n records over n/2
	// ids, each twice, the copy later on the same partition: that is where
	// Kafka puts a duplicate, since it has the same key (a producer retry, a
	// re-publish). "dup50x" is the same with the copy on any partition (a
	// re-keyed duplicate), reported for information: there a copy can meet
	// its original in another partition's open transaction and wait for it.
	rng := rand.New(rand.NewPCG(11, 12))
	mk := func(id uuid.UUID, p int) kafka.Message {
		return kafka.Message{Partition: p, Value: []byte(fmt.Sprintf(`{"eventId":%q,"type":"payment","amount":"%d.50"}`, id, rng.IntN(1000)))}
	}
	var uniq []kafka.Message
	for i := range n {
		uniq = append(uniq, mk(uuid.Must(uuid.NewV7()), i%parts))
	}
	dupStream := func(samePartition bool) []kafka.Message {
		half := make([]uuid.UUID, n/2)
		var out []kafka.Message
		home := map[uuid.UUID]int{}
		for i := range half {
			half[i] = uuid.Must(uuid.NewV7())
			home[half[i]] = i % parts
			out = append(out, mk(half[i], i%parts))
		}
		for i, id := range half {
			// Insert the copy at a random position after its original.
			j := i + 1 + rng.IntN(len(out)-i)
			p := home[id]
			if !samePartition {
				p = rng.IntN(parts)
			}
			out = slices.Insert(out, j, mk(id, p))
		}
		return out
	}
	dup, dupX := dupStream(true), dupStream(false)
	k.MustCreateTopic(t, "dup50x", parts)
	k.MustCreateTopic(t, "dup50x.dlq", 1)
	for topic, msgs := range map[string][]kafka.Message{"unique": uniq, "dup50": dup, "dup50x": dupX} {
		w := k.Writer(topic)
		for i := 0; i < len(msgs); i += 1000 {
			if err := w.WriteMessages(ctx, msgs[i:min(i+1000, len(msgs))]...); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
	}
	t.Logf("streams: unique %d records; dup50 and dup50x %d records over %d ids", len(uniq), len(dup), n/2)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runtime := func(topic, group string, noDedup bool) float64 {
		cfg := consumer.Config{
			Brokers: k.Brokers(), Topic: topic, Group: group, Pool: pool,
			Table: dedup.Table{Interval: dedup.Daily}, Logger: quiet,
			SessionTimeout: 6 * time.Second, HeartbeatInterval: time.Second,
		}
		started := make(chan time.Time, 1)
		h := func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
			select {
			case started <- time.Now():
			default:
			}
			return handler(ctx, tx, ev)
		}
		c, err := consumer.New(cfg, h)
		if err != nil {
			t.Fatal(err)
		}
		if noDedup {
			consumer.DisableDedup(c)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		t0 := <-started
		waitGroupDone(t, k.Brokers(), group, topic, parts, 5*time.Minute)
		el := time.Since(t0)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return float64(n) / el.Seconds()
	}

	// A warm-up pass (not measured) so that no variant pays for cold caches,
	// then interleaved rounds; each variant reports its median.
	rounds := 5
	if s := os.Getenv("CONSUMER_BENCH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	t.Logf("warm-up: %.0f records/s", runtime("unique", "warmup", false))
	// Ratios are taken within a round (paired), so that load from other
	// processes on the machine cancels out as far as possible.
	var rts, noDedups, dups, dupXs, ratioB, ratioC []float64
	for i := range rounds {
		g := strconv.Itoa(i)
		rts = append(rts, runtime("unique", "rt"+g, false))
		noDedups = append(noDedups, runtime("unique", "nodedup"+g, true))
		dups = append(dups, runtime("dup50", "dup50-"+g, false))
		dupXs = append(dupXs, runtime("dup50x", "dup50x-"+g, false))
		ratioB = append(ratioB, rts[i]/noDedups[i])
		ratioC = append(ratioC, dups[i]/rts[i])
		t.Logf("round %d: runtime %.0f, without dedup %.0f, 50%% duplicates %.0f (re-keyed %.0f) records/s", i, rts[i], noDedups[i], dups[i], dupXs[i])
	}
	rt, noDedup, dupRate, dupXRate := median(rts), median(noDedups), median(dups), median(dupXs)
	t.Logf("medians: runtime %.0f, without dedup %.0f, 50%% duplicates %.0f (re-keyed %.0f) records/s", rt, noDedup, dupRate, dupXRate)
	perMsg := perMessage(t, k.Brokers(), pool, handler, n, parts)
	t.Logf("per-message pattern: %.0f records/s", perMsg)
	rss, binRate := consumerRSS(t, k.Brokers(), dsn, stmt, n, parts)
	t.Logf("cmd/consumer process: peak RSS %.1f MiB, %.0f records/s", rss, binRate)

	a, b, c := rt/perMsg, median(ratioB), median(ratioC)
	pass := a >= 10 && b >= 0.8 && c >= 1.0 && rss <= 64
	fmt.Printf("RESULT events=%d rounds=%d runtime_eps=%.0f permsg_eps=%.0f speedup_vs_permsg=%.1f nodedup_eps=%.0f ratio_vs_nodedup=%.2f dup50_eps=%.0f ratio_dup50_vs_unique=%.2f dup50_rekeyed_eps=%.0f rss_mib=%.1f pass=%v\n",
		n, rounds, rt, perMsg, a, noDedup, b, dupRate, c, dupXRate, rss, pass)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// perMessage is the baseline of the source design: one kafka-go group
// reader; per message BEGIN, dedup insert of its id, the handler if the id
// is new, COMMIT, then a synchronous offset commit.
func perMessage(t *testing.T, brokers []string, pool *pgxpool.Pool, h consumer.Handler, n, parts int) float64 {
	ctx := context.Background()
	ins, err := dedup.NewInserter(dedup.Table{}, "permsg")
	if err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: "unique", GroupID: "permsg", StartOffset: kafka.FirstOffset,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond, CommitInterval: 0,
	})
	defer r.Close()
	var t0 time.Time
	for i := range n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			t0 = time.Now()
		}
		var id uuid.UUID
		if id, err = uuid.Parse(strings.Split(string(m.Value), `"`)[3]); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := ins.Insert(ctx, tx, []uuid.UUID{id})
		if err != nil {
			t.Fatal(err)
		}
		if res.Fresh[0] {
			ev := &consumer.Event{ID: id, Payload: m.Value, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
			if err := h(consumer.ContextWithEvent(ctx, ev), tx, ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	return float64(n) / time.Since(t0).Seconds()
}

// consumerRSS runs cmd/consumer over the unique stream in a new group and
// returns its peak resident set (VmHWM) in MiB and its throughput.
func consumerRSS(t *testing.T, brokers []string, dsn, stmt string, n, parts int) (float64, float64) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "consumer")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/consumer").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"CONSUMER_BROKERS="+strings.Join(brokers, ","),
		"CONSUMER_TOPIC=unique", "CONSUMER_GROUP=rss",
		"CONSUMER_DATABASE_URL="+dsn,
		"CONSUMER_SINK=sql", "CONSUMER_SINK_SQL_STATEMENT="+stmt,
		"CONSUMER_LISTEN_ADDR=", "CONSUMER_LOG_LEVEL=warn",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
		}
	}()
	t0 := time.Now()
	waitGroupDone(t, brokers, "rss", "unique", parts, 5*time.Minute)
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

// waitGroupDone polls until the group committed the end of every partition.
func waitGroupDone(t *testing.T, brokers []string, group, topic string, parts int, d time.Duration) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	ids := make([]int, parts)
	reqs := make([]kafka.OffsetRequest, parts)
	for i := range ids {
		ids[i] = i
		reqs[i] = kafka.LastOffsetOf(i)
	}
	ctx := context.Background()
	lo, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatal(err)
	}
	end := map[int]int64{}
	for _, p := range lo.Topics[topic] {
		end[p.Partition] = p.LastOffset
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		co, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
		if err == nil {
			done := len(co.Topics[topic]) == parts
			for _, p := range co.Topics[topic] {
				if p.CommittedOffset != end[p.Partition] {
					done = false
				}
			}
			if done {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("group %s did not finish %s within %v", group, topic, d)
}
