/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// The operator's cost per object that make bench holds it to (RESULT
// operator_cost): measured at ~23 ms and ~50 KiB with 1,000 objects.
const (
	operatorCostCPUMS = 30
	operatorCostKiB   = 80
)

// TestBenchmarkManyConsumers is the operator's scale benchmark (make bench):
// OPERATOR_BENCH_OBJECTS (default 300) IdempotentConsumers in one namespace,
// each with its own table in one PostgreSQL database, reconciled by the
// manager's defaults (DefaultMaxConcurrentReconciles workers,
// DefaultDatabaseMaxConns connections per database URL, 5m lead);
// OPERATOR_BENCH_WORKERS and OPERATOR_BENCH_DB_CONNS override the two.
// It reports the time until all are Ready, the reconciles per object in the
// OPERATOR_BENCH_QUIET (default 60s) that follow (the schedule needs none:
// the next boundary is hours away), where the reconciles spent their time
// (db_share: the wall time inside database calls over the wall time of the
// reconciles, both summed over the workers), and the peak RSS of this test
// process, which holds the manager (getrusage maxrss; kube-apiserver, etcd
// and PostgreSQL are child processes and not counted, the test's own client
// and harness are). The objects' topic is on an in-process broker, so every
// topic check succeeds and the next one is --topic-check-interval (1h) away:
// an unreachable broker would be retried after 1m, inside the quiet period.
// The last line of output is `RESULT key=value ...`; with
// OPERATOR_BENCH_OUT set it is also written to that file. With
// OPERATOR_BENCH_PROFILE=dir a CPU profile of the phase from the first
// create to all Ready (cpu.pprof) and a heap profile taken at all Ready
// (heap.pprof) are written there. With OPERATOR_BENCH_PROCESS a second
// line `RESULT operator_cost ...` gives the operator process's CPU and
// memory per object (make bench: BENCH=operator_cost).
func TestBenchmarkManyConsumers(t *testing.T) {
	if os.Getenv("OPERATOR_BENCH") == "" {
		t.Skip("set OPERATOR_BENCH=1 to run the operator benchmark")
	}
	n := envInt(t, "OPERATOR_BENCH_OBJECTS", 300)
	quiet := envDuration(t, "OPERATOR_BENCH_QUIET", 60*time.Second)
	workers := envInt(t, "OPERATOR_BENCH_WORKERS", DefaultMaxConcurrentReconciles)
	conns := envInt(t, "OPERATOR_BENCH_DB_CONNS", DefaultDatabaseMaxConns)
	profileDir := os.Getenv("OPERATOR_BENCH_PROFILE")
	process := os.Getenv("OPERATOR_BENCH_PROCESS") != ""
	if process && profileDir != "" {
		t.Fatal("OPERATOR_BENCH_PROFILE profiles the manager in this process: unset OPERATOR_BENCH_PROCESS")
	}
	timed := &timedOpener{}
	te := startEnv(t, envOptions{
		realClock:    true,
		discardLogs:  true,
		noReconciler: process,
		options:      Options{RetryBase: 5 * time.Second, RetryMax: 5 * time.Minute, MaxRequeue: 24 * time.Hour, MaxConcurrentReconciles: workers},
		pool:         PoolOptions{MaxConns: int32(conns)},
		wrapStores:   func(o StoreOpener) StoreOpener { timed.next = o; return timed },
	})
	ctx := context.Background()
	ns := te.namespace(t)
	dbURL := ""
	if profileDir != "" {
		// A server of its own with pg_stat_statements: the statements the
		// reconciles sent, by total time, go to pgss.txt.
		dbURL = statementsDatabase(t, filepath.Join(profileDir, "pgss.txt"))
	} else {
		dbURL = consumertest.DatabaseURL(t)
	}
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	// The counters of reconciles: this process's registry, or the
	// operator process's metrics endpoint.
	counters := func() (count, seconds float64) { return reconcileCounters(t) }
	var op *operatorProcess
	var rssNone float64
	if process {
		op = startOperatorProcess(t, te, workers, conns)
		rssNone = op.rssMiB(t) // started, synced, no object yet
		counters = func() (float64, float64) {
			c, s, err := op.reconciles()
			if err != nil {
				t.Fatalf("reading the operator's metrics: %v", err)
			}
			return c, s
		}
	}
	k := consumertest.NewKafka(t)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The topic and its dead-letter topic: a consumer object is Ready only
	// when both exist (KafkaReady).
	for _, topic := range []string{"orders", "orders.dlq"} {
		if err := k.CreateTopic(cctx, topic, 4, map[string]string{"retention.ms": retentionMS(24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	obj := func(i int) *kafkav1alpha1.IdempotentConsumer {
		return newConsumer(ns, fmt.Sprintf("c-%04d", i), withTable(fmt.Sprintf("pe_%04d", i)), withKafka(k.Brokers(), "orders"))
	}

	// Baseline: one object alone.
	start := time.Now()
	te.create(t, obj(0))
	te.waitReady(t, ns, obj(0).Name)
	single := time.Since(start)

	// All of them.
	if profileDir != "" {
		f, err := os.Create(filepath.Join(profileDir, "cpu.pprof"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
	}
	apiProfile := make(chan error, 1)
	if profileDir != "" {
		// The API server's CPU profile of the first 20 s of the phase.
		go func() { apiProfile <- apiServerProfile(te, filepath.Join(profileDir, "apiserver-cpu.pprof"), 20) }()
	} else {
		apiProfile <- nil
	}
	atStart, recAtStart := counters()
	apiAtStart := apiRequests(t, te)
	cpuAtStart := cpuByProcess(t)
	dbAtStart := timed.seconds()
	start = time.Now()
	for i := 1; i < n; i++ {
		te.create(t, obj(i))
	}
	created := time.Since(start)
	var ready int
	deadline := time.Now().Add(15 * time.Minute)
	lastLog := time.Now()
	for {
		// Read from the manager's own cache without copies: a list of every
		// object from the API server would be the harness's largest
		// allocation, and it would count in the peak RSS.
		var list kafkav1alpha1.IdempotentConsumerList
		if err := te.cached.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			t.Fatal(err)
		}
		ready = 0
		waiting := map[string]int{} // Ready's reason on the objects not Ready
		for i := range list.Items {
			if list.Items[i].IsReady() {
				ready++
			} else if c := meta.FindStatusCondition(list.Items[i].Status.Conditions, kafkav1alpha1.ConditionReady); c != nil {
				waiting[c.Reason]++
			} else {
				waiting["NoReadyCondition"]++
			}
		}
		if ready == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Ready after 15 minutes; the others by Ready's reason: %v", ready, n, waiting)
		}
		if time.Since(lastLog) >= 30*time.Second {
			t.Logf("%s: %d of %d Ready; the others by Ready's reason: %v", time.Since(start).Round(time.Second), ready, n, waiting)
			lastLog = time.Now()
		}
		time.Sleep(500 * time.Millisecond)
	}
	allReady := time.Since(start)
	countAtReady, recAtReady := counters()
	toReady := countAtReady - atStart
	var apiWrites float64
	var byKind []string
	for k, v := range apiRequests(t, te) {
		if d := v - apiAtStart[k]; d > 0 && !strings.HasPrefix(k, "GET ") && !strings.HasPrefix(k, "LIST ") && !strings.HasPrefix(k, "WATCH ") {
			apiWrites += d
			byKind = append(byKind, fmt.Sprintf("%s=%.2f", k, d/float64(n-1)))
		}
	}
	sort.Strings(byKind)
	var cpuParts []string
	cpu := cpuSpent(cpuAtStart, cpuByProcess(t))
	for _, name := range []string{"test", "manager", "kube-apiserver", "etcd", "postgres"} {
		if name == "manager" && !process {
			continue // the manager is in "test"
		}
		cpuParts = append(cpuParts, fmt.Sprintf("cpu_s_%s=%.1f", strings.ReplaceAll(name, "-", "_"), cpu[name]))
	}
	t.Logf("API server writes per object until all Ready (every client: the manager, the stand-in Deployment controller, the test's creates): %s", strings.Join(byKind, " "))
	recSeconds := recAtReady - recAtStart
	dbSeconds := timed.seconds() - dbAtStart
	if profileDir != "" {
		pprof.StopCPUProfile()
		f, err := os.Create(filepath.Join(profileDir, "heap.pprof"))
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Error(err)
		}
		_ = f.Close()
	}

	if err := <-apiProfile; err != nil {
		t.Errorf("profiling the API server: %v", err)
	}

	// The quiet period: only the schedule may wake the reconciler.
	before, _ := counters()
	time.Sleep(quiet)
	after, _ := counters()

	perObject := allReady.Seconds() / float64(n-1)
	result := fmt.Sprintf("RESULT objects=%d workers=%d db_conns=%d seconds_to_all_ready=%.1f single_object_seconds=%.2f per_object_ms=%.0f vs_single=%.2f create_seconds=%.1f reconciles_per_object_to_ready=%.2f api_writes_per_object=%.1f reconcile_ms_per_object=%.0f",
		n, workers, conns, allReady.Seconds(), single.Seconds(), perObject*1000, perObject/single.Seconds(), created.Seconds(), toReady/float64(n-1), apiWrites/float64(n-1),
		recSeconds*1000/float64(n-1))
	if process {
		// The operator's own process: its peak RSS (VmHWM); the time inside
		// database calls is not measured there.
		result += fmt.Sprintf(" reconciles_per_object_%ds=%.3f peak_rss_mib=%.0f operator=process",
			int(quiet.Seconds()), (after-before)/float64(n), op.peakRSSMiB(t))
		t.Logf("the peak RSS is the operator process's (cmd/manager), from /proc/<pid>/status VmHWM; its log: %s", op.log)
	} else {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		result += fmt.Sprintf(" db_ms_per_object=%.0f db_share=%.2f reconciles_per_object_%ds=%.3f peak_rss_mib=%.0f heap_inuse_mib=%.0f operator=in-process",
			dbSeconds*1000/float64(n-1), dbSeconds/recSeconds, int(quiet.Seconds()), (after-before)/float64(n), float64(ru.Maxrss)/1024, float64(ms.HeapInuse)/(1<<20))
		t.Logf("the peak RSS is this test process's (manager + test client + harness), from getrusage maxrss")
	}
	result += " " + strings.Join(cpuParts, " ") + fmt.Sprintf(" cores=%d", runtime.NumCPU())
	fmt.Println(result)
	if process {
		// The operator's own cost per object: its CPU from the first create
		// to all Ready, and (peak RSS with n objects - RSS with none) / n.
		cpuMS := cpu["manager"] * 1000 / float64(n-1)
		kib := (op.peakRSSMiB(t) - rssNone) * 1024 / float64(n)
		fmt.Printf("RESULT operator_cost cpu_ms_per_object=%.1f kib_per_object=%.0f objects=%d rss_none_mib=%.0f within_targets=%t (targets: cpu_ms_per_object<=%d kib_per_object<=%d)\n",
			cpuMS, kib, n, rssNone, cpuMS <= operatorCostCPUMS && kib <= operatorCostKiB, operatorCostCPUMS, operatorCostKiB)
	}
	if out := os.Getenv("OPERATOR_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(result+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// statementsDatabase starts a PostgreSQL server that tracks statements
// (pg_stat_statements) and returns its URL; at cleanup the 40 statements with
// the largest total time are written to out.
func statementsDatabase(t *testing.T, out string) string {
	t.Helper()
	pg, err := consumertest.StartPostgres(consumertest.WithSetting("shared_preload_libraries", "pg_stat_statements"),
		consumertest.WithSetting("pg_stat_statements.track_utility", "on"), consumertest.WithSetting("pg_stat_statements.max", "20000"))
	if err != nil {
		t.Fatal(err)
	}
	url := pg.URL("postgres")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer func() { _ = pg.Stop() }()
		defer conn.Close(ctx)
		// Utility statements (DDL) are tracked one text each: grouped
		// here with their identifiers and literals taken out.
		rows, err := conn.Query(ctx, `
SELECT sum(calls)::bigint, round(sum(total_exec_time))::bigint, (sum(total_exec_time) / sum(calls))::float8, sum(wal_records)::bigint, q
  FROM (SELECT calls, total_exec_time, wal_records,
               left(regexp_replace(regexp_replace(query, '"[^"]*"|''[^'']*''|[0-9]+', '?', 'g'), '\s+', ' ', 'g'), 160) AS q
          FROM pg_stat_statements) s
 GROUP BY q ORDER BY 2 DESC LIMIT 40`)
		if err != nil {
			t.Error(err)
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%8s %9s %9s %8s  %s\n", "calls", "total_ms", "mean_ms", "wal_recs", "query")
		for rows.Next() {
			var (
				calls, total, wal int64
				mean              float64
				q                 string
			)
			if err := rows.Scan(&calls, &total, &mean, &wal, &q); err != nil {
				t.Error(err)
				return
			}
			fmt.Fprintf(&b, "%8d %9d %9.2f %8d  %s\n", calls, total, mean, wal, q)
		}
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	})
	return url
}

// timedOpener sums the wall time spent inside TableStore calls, to tell the
// database's share of a reconcile from the API server's and the operator's.
type timedOpener struct {
	next  StoreOpener
	nanos atomic.Int64
}

func (o *timedOpener) Open(ctx context.Context, db DatabaseConn, tb dedup.Table) (TableStore, error) {
	s, err := o.next.Open(ctx, db, tb)
	if err != nil {
		return nil, err
	}
	return &timedStore{TableStore: s, nanos: &o.nanos}, nil
}

func (o *timedOpener) seconds() float64 { return time.Duration(o.nanos.Load()).Seconds() }

type timedStore struct {
	TableStore
	nanos *atomic.Int64
}

func (s *timedStore) since(t0 time.Time) { s.nanos.Add(int64(time.Since(t0))) }

func (s *timedStore) EnsureTable(ctx context.Context, owner string) error {
	defer s.since(time.Now())
	return s.TableStore.EnsureTable(ctx, owner)
}

func (s *timedStore) Adopt(ctx context.Context, owner, from string) (dedup.AdoptResult, error) {
	defer s.since(time.Now())
	return s.TableStore.Adopt(ctx, owner, from)
}

func (s *timedStore) Observe(ctx context.Context) (dedup.State, error) {
	defer s.since(time.Now())
	return s.TableStore.Observe(ctx)
}

func (s *timedStore) Maintain(ctx context.Context, now time.Time, premake int, retention time.Duration) (dedup.Result, error) {
	defer s.since(time.Now())
	return s.TableStore.Maintain(ctx, now, premake, retention)
}

func (s *timedStore) DropTable(ctx context.Context, owner string) error {
	defer s.since(time.Now())
	return s.TableStore.DropTable(ctx, owner)
}

func (s *timedStore) Durability(ctx context.Context) (dedup.Durability, error) {
	defer s.since(time.Now())
	return s.TableStore.Durability(ctx)
}

// apiServerProfile writes the API server's CPU profile of the next seconds
// to path.
func apiServerProfile(te *testEnv, path string, seconds int) error {
	cs, err := kubernetes.NewForConfig(te.cfg.Config)
	if err != nil {
		return err
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+30) * time.Second).DoRaw(context.Background())
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// procCPU is a process's CPU seconds so far (user and system), by name.
type procCPU struct {
	name    string
	seconds float64
}

// cpuByProcess reads the CPU seconds used so far by this test process
// ("test": the harness, and the manager unless it runs as a process of its
// own) and by the processes it started, by pid: the operator process
// ("manager"), the API server, etcd and PostgreSQL (the postmaster's
// children too). Other processes of the machine (another test's servers)
// are left out.
func cpuByProcess(t *testing.T) map[int]procCPU {
	t.Helper()
	const ticks = 100 // USER_HZ on Linux
	type proc struct {
		ppid    int
		comm    string
		seconds float64
	}
	all := map[int]proc{}
	self := os.Getpid()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ... utime stime: after the closing
		// parenthesis (comm may hold spaces), fields 2, 12 and 13.
		open, closing := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(string(raw[closing+1:]))
		if len(fields) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		all[pid] = proc{ppid: ppid, comm: string(raw[open+1 : closing]), seconds: (utime + stime) / ticks}
	}
	out := map[int]procCPU{}
	for pid, p := range all {
		switch {
		case pid == self:
			out[pid] = procCPU{"test", p.seconds}
		case p.ppid == self || all[p.ppid].ppid == self:
			switch p.comm {
			case "manager", "kube-apiserver", "etcd", "postgres":
				out[pid] = procCPU{p.comm, p.seconds}
			}
		}
	}
	return out
}

// cpuSpent sums by name the CPU seconds each process used between two
// readings of cpuByProcess. A process that exited in between (a short-lived
// PostgreSQL backend or autovacuum worker) is not counted.
func cpuSpent(start, end map[int]procCPU) map[string]float64 {
	out := map[string]float64{}
	for pid, e := range end {
		out[e.name] += e.seconds - start[pid].seconds
	}
	return out
}

// apiRequests reads the API server's apiserver_request_total: requests by
// "VERB resource[/subresource]", from every client. The exposition (some
// MiB) is read a line at a time: the peak RSS this benchmark reports is
// this process's.
func apiRequests(t *testing.T, te *testEnv) map[string]float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(te.cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").Stream(context.Background())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	defer body.Close()
	label := regexp.MustCompile(`(verb|resource|subresource)="([^"]*)"`)
	out := map[string]float64{}
	err = scanSamples(body, func(name, labels string, v float64) {
		if name != "apiserver_request_total" {
			return
		}
		l := map[string]string{}
		for _, m := range label.FindAllStringSubmatch(labels, -1) {
			l[m[1]] = m[2]
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	})
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	return out
}

// reconcileCounters reads controller-runtime's reconcile counter and the
// sum of its reconcile time histogram for our controller, from one gather
// of this process's registry (which builds every per-object series too).
func reconcileCounters(t *testing.T) (count, seconds float64) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		name := f.GetName()
		if name != "controller_runtime_reconcile_total" && name != "controller_runtime_reconcile_time_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "controller" || l.GetValue() != ControllerName {
					continue
				}
				if name == "controller_runtime_reconcile_total" {
					count += m.GetCounter().GetValue()
				} else {
					seconds += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return count, seconds
}

func envInt(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", name, v)
		}
		return n
	}
	return def
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		return d
	}
	return def
}
