package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// scaleParts is the partition count of the scale benchmark's topics: the
// most consumer processes of one group that can hold a partition each.
const scaleParts = 8

// TestBenchScale measures how the throughput of cmd/consumer grows with
// replicas: 1, 2 and 4 processes in one consumer group on one 8-partition
// topic, one broker (kfake, in this process) and one PostgreSQL, for the SQL
// sink (an INSERT of one row per event in the dedup transaction) and for the
// HTTP sink against a provider in this process that answers after 20 ms
// (the sink's defaults: Key ordering, 64 requests in flight per process).
// Each run is a new group over the same records, so every event is new to it
// (scope ConsumerGroup), and each run checks its effects: every event exactly
// once (SQL: one row per id; HTTP: one call per Idempotency-Key), else the
// test fails.
//
// Each run has a topic of its own, filled only once the group is stable
// with all its replicas (DescribeGroups says Stable, every partition
// assigned), so process start-up and the rebalances while the replicas join
// are not measured. Reported per sink and replica count: eps, the events over
// the span from the first effect to the last (SQL: the rows' insert times;
// HTTP: the provider's first request and last answer); vs_1, the ratio to one
// process; produce_s, how long filling the topic took (it overlaps the
// consumption, so it must stay well under the span); the CPU seconds of PostgreSQL (the postmaster and all its
// backends), of the consumer processes and of this process (broker,
// provider, harness) over the whole run, db_cpu_share = PostgreSQL's part of
// the three; the database transactions committed per event
// (pg_stat_database.xact_commit); for HTTP also the provider's mean and peak
// requests in flight (what a replica keeps busy of its 64). The machine is shared: compare the ratios.
//
// It runs only with CONSUMER_BENCH_SCALE=1 (BENCH=scale make bench):
//
//	CONSUMER_BENCH_SCALE=1 go test ./consumer/ -run '^TestBenchScale$' -count=1 -v -timeout 30m
//
// CONSUMER_BENCH_SCALE_SQL_EVENTS (default 60000) and
// CONSUMER_BENCH_SCALE_HTTP_EVENTS (default 20000) size the two topics. The
// last two lines are "RESULT scale sink=sql replicas=1,2,4 eps=a,b,c ..."
// and the same for sink=http.
func TestBenchScale(t *testing.T) {
	if os.Getenv("CONSUMER_BENCH_SCALE") == "" {
		t.Skip("set CONSUMER_BENCH_SCALE=1 to run the benchmark")
	}
	sqlEvents := scaleEnvInt(t, "CONSUMER_BENCH_SCALE_SQL_EVENTS", 60000)
	httpEvents := scaleEnvInt(t, "CONSUMER_BENCH_SCALE_HTTP_EVENTS", 20000)
	replicas := []int{1, 2, 4}
	ctx := context.Background()
	k := consumertest.NewKafka(t)
	dsn := consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	createTables(t, pool, dedup.Table{Interval: dedup.Daily})
	pgCPU := postgresCPU(t, pool)

	bin := filepath.Join(t.TempDir(), "consumer")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/consumer").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	provider := newSlowProvider(slowLatency)
	srv := httptest.NewServer(provider)
	defer srv.Close()

	for _, sk := range []struct {
		name string
		n    int
	}{{"sql", sqlEvents}, {"http", httpEvents}} {
		var eps, vs1, prod, inFlight, pgSec, consSec, selfSec, share, xacts []string
		var base float64
		for _, r := range replicas {
			run := fmt.Sprintf("%s-r%d", sk.name, r)
			// A topic per run, filled only once the group is stable with all
			// its replicas: the rebalances while they join are not measured.
			topic := "scale-" + run
			createTopic(t, k, topic, scaleParts, nil)
			k.MustCreateTopic(t, topic+".dlq", 1)
			env := []string{envvars.Sink + "=" + sk.name}
			if sk.name == "sql" {
				table := "scale_effect_r" + strconv.Itoa(r)
				if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (event_id uuid NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
					t.Fatal(err)
				}
				env = append(env, envvars.SinkSQLStatement+"=INSERT INTO "+table+" (event_id) VALUES ($1)")
			} else {
				env = append(env, envvars.SinkHTTPURL+"="+srv.URL+"/"+run)
			}
			xact0 := xactCommit(t, pool)
			pg0, self0 := pgCPU(), selfCPU(t)
			var produced time.Duration
			cons := runReplicas(t, bin, k.Brokers(), dsn, topic, run, r, env, func() {
				t0 := time.Now()
				produceKeyed(t, k, topic, sk.n)
				produced = time.Since(t0)
			})
			pg1, self1 := pgCPU(), selfCPU(t)
			xact1 := xactCommit(t, pool)

			var first, last time.Time
			if sk.name == "sql" {
				table := pgx.Identifier{"scale_effect_r" + strconv.Itoa(r)}.Sanitize()
				var rows, distinct int
				if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id), min(at), max(at) FROM `+table).Scan(&rows, &distinct, &first, &last); err != nil {
					t.Fatal(err)
				}
				if rows != sk.n || distinct != sk.n {
					t.Errorf("%s: %d effect rows for %d distinct ids, want %d each", run, rows, distinct, sk.n)
				}
			} else {
				calls, unique, perMax := provider.counts(run)
				if unique != sk.n || calls != sk.n || perMax != 1 {
					t.Errorf("%s: %d calls for %d keys (at most %d per key), want %d each and 1", run, calls, unique, perMax, sk.n)
				}
				var peak int
				var mean float64
				first, last, peak, mean = provider.span(run)
				inFlight = append(inFlight, fmt.Sprintf("%.0f/%d", mean, peak))
			}
			e := float64(sk.n) / last.Sub(first).Seconds()
			if r == 1 {
				base = e
			}
			p, s := pg1-pg0, self1-self0
			eps = append(eps, fmt.Sprintf("%.0f", e))
			vs1 = append(vs1, fmt.Sprintf("%.2f", e/base))
			prod = append(prod, fmt.Sprintf("%.1f", produced.Seconds()))
			pgSec = append(pgSec, fmt.Sprintf("%.1f", p))
			consSec = append(consSec, fmt.Sprintf("%.1f", cons))
			selfSec = append(selfSec, fmt.Sprintf("%.1f", s))
			share = append(share, fmt.Sprintf("%.2f", p/(p+cons+s)))
			xacts = append(xacts, fmt.Sprintf("%.3f", float64(xact1-xact0)/float64(sk.n)))
			t.Logf("%s: %d events in %s from the first effect to the last (produced in %s): %.0f eps; CPU s: postgres %.1f, consumers %.1f, broker+harness %.1f",
				run, sk.n, last.Sub(first).Round(time.Millisecond), produced.Round(time.Millisecond), e, p, cons, s)
			deleteTopics(t, k.Brokers(), topic, topic+".dlq")
		}
		j := func(xs []string) string { return strings.Join(xs, ",") }
		rs := make([]string, len(replicas))
		for i, r := range replicas {
			rs[i] = strconv.Itoa(r)
		}
		extra := ""
		if sk.name == "http" {
			extra = fmt.Sprintf(" latency_ms=%d max_in_flight=64 bound_eps_per_replica=%.0f in_flight_mean_peak=%s", slowLatency.Milliseconds(), 64/slowLatency.Seconds(), j(inFlight))
		}
		fmt.Printf("RESULT scale sink=%s partitions=%d events=%d replicas=%s eps=%s vs_1=%s produce_s=%s pg_cpu_s=%s consumers_cpu_s=%s broker_harness_cpu_s=%s db_cpu_share=%s xacts_per_event=%s%s\n",
			sk.name, scaleParts, sk.n, j(rs), j(eps), j(vs1), j(prod), j(pgSec), j(consSec), j(selfSec), j(share), j(xacts), extra)
	}
}

// produceKeyed writes n small events round-robin over the partitions, with
// 2000 distinct keys so that Key ordering leaves plenty of work in flight.
func produceKeyed(t *testing.T, k *consumertest.Kafka, topic string, n int) {
	t.Helper()
	w := consumertest.NewWriter(k.Brokers(), topic)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	batch := make([]kafka.Message, 0, 2000)
	for i := range n {
		v := fmt.Sprintf(`{"eventId":%q,"type":"scale","amount":"%d.50"}`, uuid.Must(uuid.NewV7()), i%1000)
		batch = append(batch, kafka.Message{Partition: i % scaleParts, Key: []byte("k-" + strconv.Itoa(i%2000)), Value: []byte(v)})
		if len(batch) == cap(batch) || i == n-1 {
			if err := w.WriteMessages(ctx, batch...); err != nil {
				t.Fatalf("producing to %s: %v", topic, err)
			}
			batch = batch[:0]
		}
	}
}

// runReplicas starts r cmd/consumer processes in group on topic, waits until
// the group is stable with r members holding every partition, runs produce,
// waits until the group committed the end of every partition, stops the
// processes, and returns the CPU seconds (user + system) they used.
func runReplicas(t *testing.T, bin string, brokers []string, dsn, topic, group string, r int, extraEnv []string, produce func()) float64 {
	t.Helper()
	cmds := make([]*exec.Cmd, r)
	var logged sync.WaitGroup
	for i := range cmds {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(),
			envvars.Brokers+"="+strings.Join(brokers, ","),
			envvars.Topic+"="+topic, envvars.Group+"="+group,
			envvars.DatabaseURL+"="+dsn,
			// An empty CONSUMER_LISTEN_ADDR means the default :8080, which
			// the replicas cannot all bind: each takes a free port instead.
			envvars.ListenAddr+"=127.0.0.1:0", envvars.LogLevel+"=warn",
		)
		cmd.Env = append(cmd.Env, extraEnv...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s/%d", group, i)
		logged.Add(1)
		go func() {
			defer logged.Done()
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				t.Logf("%s: %s", name, sc.Text())
			}
		}()
		cmds[i] = cmd
	}
	// A replica that exits early (it could not start) makes the comparison
	// meaningless: fail rather than report fewer replicas than named.
	exited := make(chan int, r)
	for i, cmd := range cmds {
		go func() { _ = cmd.Wait(); exited <- i }()
	}
	defer func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
		}
		logged.Wait()
	}()
	waitGroupStable(t, brokers, group, r, time.Minute)
	produce()
	waitGroupDone(t, brokers, group, topic, scaleParts, 10*time.Minute)
	select {
	case i := <-exited:
		t.Fatalf("%s/%d exited before the group was done: %v", group, i, cmds[i].ProcessState)
	default:
	}
	for _, cmd := range cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	var cpu float64
	for range cmds {
		i := <-exited
		if ru, ok := cmds[i].ProcessState.SysUsage().(*syscall.Rusage); ok {
			cpu += tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
		}
	}
	return cpu
}

// waitGroupStable polls DescribeGroups until group is Stable with members
// members that together hold all scaleParts partitions.
func waitGroupStable(t *testing.T, brokers []string, group string, members int, d time.Duration) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	deadline := time.Now().Add(d)
	last := "no answer"
	for time.Now().Before(deadline) {
		res, err := client.DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err == nil && len(res.Groups) == 1 && res.Groups[0].Error == nil {
			g := res.Groups[0]
			parts := 0
			for _, m := range g.Members {
				for _, tp := range m.MemberAssignments.Topics {
					parts += len(tp.Partitions)
				}
			}
			if g.GroupState == "Stable" && len(g.Members) == members && parts == scaleParts {
				return
			}
			last = fmt.Sprintf("state %s, %d members, %d partitions assigned", g.GroupState, len(g.Members), parts)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("group %s not stable with %d members within %s: %s", group, members, d, last)
}

func tvSeconds(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// selfCPU is this process's CPU seconds: the broker, the HTTP provider and
// the harness.
func selfCPU(t *testing.T) float64 {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
}

// postgresCPU returns a function reading the CPU seconds of the PostgreSQL
// server behind pool: its postmaster (including the backends that exited
// and were reaped) plus every live child. It reads /proc, so the server must
// run on this machine; otherwise the function returns 0 and says so once.
func postgresCPU(t *testing.T, pool *pgxpool.Pool) func() float64 {
	t.Helper()
	var backend int
	if err := pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		t.Fatal(err)
	}
	st, err := readProcStat(backend)
	if err != nil {
		t.Logf("PostgreSQL's processes are not readable here (%v): its CPU time is reported as 0", err)
		return func() float64 { return 0 }
	}
	postmaster := st.ppid
	return func() float64 {
		pm, err := readProcStat(postmaster)
		if err != nil {
			t.Errorf("reading the postmaster's CPU time: %v", err)
			return 0
		}
		ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if c, err := readProcStat(pid); err == nil && c.ppid == postmaster {
				ticks += c.utime + c.stime
			}
		}
		return float64(ticks) / 100 // USER_HZ
	}
}

type procTimes struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

// readProcStat reads the parent and the CPU times (clock ticks) of pid from
// /proc/<pid>/stat.
func readProcStat(pid int) (procTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	// The command name is in parentheses and may contain spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	num := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	// Fields after the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	return procTimes{ppid: int(num(1)), utime: num(11), stime: num(12), cutime: num(13), cstime: num(14)}, nil
}

// xactCommit is pg_stat_database.xact_commit summed over all databases (the
// statistics are flushed at most once a second: read after a pause).
func xactCommit(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	time.Sleep(1100 * time.Millisecond)
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT sum(xact_commit)::bigint FROM pg_stat_database`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func scaleEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", name, v)
		}
		return n
	}
	return def
}
