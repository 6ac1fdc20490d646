package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"testing"

	"github.com/idempotency-dev/operator/hack/internal/localstack"
)

// newDocRunner makes the runner's directory and environment: the shims (this
// test binary under each tool's name) first in PATH, kubectl's kubeconfig,
// and the swaps from the cluster's addresses in the docs to the local ones.
func newDocRunner(t *testing.T, s *system, assets, broker string, pgPort int) *docRunner {
	t.Helper()
	dir := filepath.Join(s.work, "walk")
	shimDir := filepath.Join(s.work, "shims")
	for _, d := range []string{dir, shimDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for name := range shims {
		if err := os.Symlink(self, filepath.Join(shimDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql"); len(m) > 0 {
			psql = m[len(m)-1]
		} else {
			t.Fatal("psql not found: the walk's SQL blocks run in psql")
		}
	}
	env := localstack.SetEnv(os.Environ(), "PATH", shimDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	env = localstack.SetEnv(env, "KUBECONFIG", s.kubeconfig)
	env = localstack.SetEnv(env, envRealKubectl, filepath.Join(assets, "kubectl"))
	env = localstack.SetEnv(env, envLogDir, s.work)
	return &docRunner{
		t: t, root: s.root, dir: dir, env: env, psql: psql,
		subs: []string{
			"kafka.kafka.svc:9092", broker,
			"postgres.db.svc:5432", "127.0.0.1:" + strconv.Itoa(pgPort),
		},
		skip: []docSkip{
			{"VERSION=", "no release is downloaded here"},
			{"BASE=", "no release is downloaded here"},
			{"kubectl apply --server-side -f $BASE/", "the CRD comes from config/crd, as make install applies it"},
			{"kubectl apply -f $BASE/", "the operator runs as a local process"},
			{"kubectl delete -f $BASE/", "the operator runs as a local process"},
			{"kubectl -n idempotency-system rollout status", "the operator runs as a local process"},
			{"make ", "no image is built or pushed here"},
			{"kubectl -n shop get ic orders -w", "watches until interrupted; kubectl wait follows it"},
			{"kubectl -n shop port-forward", "no Pod network here: the test reads the local consumer's /metrics itself"},
			{"curl -s localhost:8080/metrics", "no Pod network here: the test reads the local consumer's /metrics itself"},
		},
	}
}

// assertDuplicateCounted: "the consumer's metrics count it": the second copy
// shows as a skipped duplicate on the consumer's /metrics.
func (r *docRunner) assertDuplicateCounted(ctx context.Context, k *localstack.Kubelet) {
	cs := k.Consumers("shop", "orders-consumer")
	if len(cs) == 0 {
		r.t.Fatal("no local process runs Deployment shop/orders-consumer")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var dups, processed float64
		for _, c := range cs {
			d, err := scrapeCounter(ctx, "http://"+c.Addr+"/metrics", "idempotent_consumer_duplicates_skipped_total")
			if err != nil {
				r.t.Fatal(err)
			}
			p, err := scrapeCounter(ctx, "http://"+c.Addr+"/metrics", "idempotent_consumer_events_processed_total")
			if err != nil {
				r.t.Fatal(err)
			}
			dups, processed = dups+d, processed+p
		}
		if dups >= 1 && processed >= 1 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after the event sent twice: %v processed, %v duplicates skipped; want at least 1 of each", processed, dups)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readmeExample applies README.md's example in a namespace of its own, with
// what the README says it needs (the Secret ledger-db, the ledger table,
// the topic and its dead-letter topic), and checks that `kubectl get ic
// ledger` shows it Ready.
func (r *docRunner) readmeExample(ctx context.Context, k *localstack.Kubelet) {
	t := r.t
	blocks, err := mdBlocks(filepath.Join(r.root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, b := range blocks {
		if b.lang == "yaml" && strings.Contains(b.text, "kind: IdempotentConsumer") {
			example = r.substitute(b.text)
		}
	}
	if example == "" {
		t.Fatal("README.md has no IdempotentConsumer example")
	}
	if err := os.WriteFile(filepath.Join(r.dir, "readme-example.yaml"), []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	// A database of its own: the walk's objects left their tables in theirs.
	dbURL := strings.Replace(r.sqlURLs[0], "/postgres?", "/readme?", 1)
	script := fmt.Sprintf(`
psql -X -q -v ON_ERROR_STOP=1 -d '%s' -c 'CREATE DATABASE readme'
psql -X -q -v ON_ERROR_STOP=1 -d '%s' <<'SQL'
%s
SQL
kubectl create namespace readme
kubectl -n readme create secret generic ledger-db --from-literal=url='%s'
kafka-topics.sh --bootstrap-server %s --create --topic ledger.entries --partitions 2
kafka-topics.sh --bootstrap-server %[5]s --create --topic ledger.entries.dlq --partitions 1
kubectl -n readme apply -f readme-example.yaml
kubectl -n readme wait --for=condition=Ready ic/ledger --timeout=3m
kubectl -n readme get ic ledger
`, r.sqlURLs[0], dbURL, ledgerDDL, dbURL, r.subs[1])
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = r.dir, localstack.SetEnv(r.env, "PATH", filepath.Dir(r.psql)+string(os.PathListSeparator)+envValue(r.env, "PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README.md's example: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "ledger") || !strings.Contains(last, "True") {
		t.Errorf("kubectl get ic ledger: %q, want it Ready", last)
	}
	if n := len(k.Consumers("readme", "ledger-consumer")); n != 2 {
		t.Errorf("README.md's example runs %d consumer processes, want its 2 replicas", n)
	}
	r.ran = append(r.ran, "README.md: applied the example; "+lines[len(lines)-1])
}

func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}
