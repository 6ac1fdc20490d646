package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

func TestMain(m *testing.M) {
	if name := filepath.Base(os.Args[0]); shims[name] != nil {
		os.Exit(runShim(name))
	}
	os.Exit(m.Run())
}

// mdBlock is one fenced code block of a Markdown page.
type mdBlock struct {
	lang string
	file string // "orders.yaml" for a YAML block whose first line is "# orders.yaml"
	text string
	line int // of the opening fence
}

var fileComment = regexp.MustCompile(`^#\s+(\S+\.ya?ml)\s*$`)

// mdBlocks reads the fenced code blocks of a Markdown file, indented ones (in
// list items) included.
func mdBlocks(path string) ([]mdBlock, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []mdBlock
	var cur *mdBlock
	var indent string
	for i, l := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &mdBlock{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), line: i + 1}
			indent = l[:len(l)-len(trimmed)]
		case cur != nil && strings.TrimSpace(l) == "```":
			if m := fileComment.FindStringSubmatch(strings.SplitN(cur.text, "\n", 2)[0]); m != nil {
				cur.file = m[1]
			}
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += strings.TrimPrefix(l, indent) + "\n"
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: unclosed code block", path, cur.line)
	}
	return out, nil
}

// docRunner runs a page's blocks in order against the local stack.
type docRunner struct {
	t       *testing.T
	root    string   // the repository
	dir     string   // working directory: YAML files land here
	env     []string // PATH with the shims first, KUBECONFIG, ...
	subs    []string // old, new pairs: cluster addresses -> local ones
	skip    []docSkip
	psql    string
	sqlURLs []string // the URL of each SQL block in turn; the last one repeats
	sqlN    int
	ran     []string // what ran, for the log
}

// docSkip is a command the walk shows that cannot run here, and why.
type docSkip struct{ prefix, why string }

var expectedLine = regexp.MustCompile(`^#\s+(\w+=\S+)\s*$`)

func (r *docRunner) substitute(s string) string {
	return strings.NewReplacer(r.subs...).Replace(s)
}

// logicalLines joins backslash continuations.
func logicalLines(text string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}

// block runs one block and returns its output (nil for a block that is
// not run). YAML blocks with a file name are written to r.dir; SQL blocks
// run in psql; shell blocks in bash -e -o pipefail, without the skipped
// commands, and each "# key=value" line under a command must appear in the
// output.
func (r *docRunner) block(ctx context.Context, page string, b mdBlock) []byte {
	t := r.t
	where := fmt.Sprintf("%s:%d", page, b.line)
	text := r.substitute(b.text)
	switch b.lang {
	case "yaml":
		if b.file == "" || b.file == "kustomization.yaml" {
			return nil // an excerpt, or an overlay for a GitOps repository
		}
		if err := os.WriteFile(filepath.Join(r.dir, b.file), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		r.ran = append(r.ran, where+": wrote "+b.file)
		return nil
	case "sql":
		url := r.sqlURLs[min(r.sqlN, len(r.sqlURLs)-1)]
		r.sqlN++
		cmd := exec.CommandContext(ctx, r.psql, "-X", "-v", "ON_ERROR_STOP=1", "-d", url)
		cmd.Stdin = strings.NewReader(text)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: psql: %v\n%s", where, err, out)
		}
		r.ran = append(r.ran, where+": psql")
		return out
	case "sh":
	default:
		return nil
	}
	var script, expect []string
	for _, l := range logicalLines(text) {
		trimmed := strings.TrimSpace(l)
		if m := expectedLine.FindStringSubmatch(trimmed); m != nil {
			expect = append(expect, m[1])
			continue
		}
		if skip := r.skipped(trimmed); skip != "" {
			r.ran = append(r.ran, fmt.Sprintf("%s: not run here (%s): %s", where, skip, trimmed))
			continue
		}
		script = append(script, l)
	}
	if strings.TrimSpace(strings.Join(script, "")) == "" {
		return nil
	}
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", strings.Join(script, "\n"))
	cmd.Dir, cmd.Env = r.dir, r.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: the walk's commands failed: %v\n%s\n--- output:\n%s", where, err, strings.Join(script, "\n"), out.String())
	}
	for _, e := range expect {
		if !strings.Contains(out.String(), e+"\n") {
			t.Errorf("%s: the page promises %q in the output; got:\n%s", where, e, out.String())
		}
	}
	r.ran = append(r.ran, where+": ran "+strings.Join(script, " ; "))
	return out.Bytes()
}

func (r *docRunner) skipped(line string) string {
	for _, s := range r.skip {
		if strings.HasPrefix(line, s.prefix) {
			return s.why
		}
	}
	return ""
}

// TestGettingStartedRuns follows docs/getting-started.md (and README.md's
// example) on the local stack of the demo: a real kube-apiserver with
// kubectl, PostgreSQL with TLS, the broker, the operator process, and a
// local kubelet that runs the consumer Deployments as processes. Every YAML
// and shell block of the walk runs as written, with the cluster's addresses
// swapped for the local ones; what cannot run on one machine (installing a
// release from its URL, building images, port-forwarding) is named in
// skips, and nothing else is left out. The outcomes the page promises are
// asserted: each object Ready (kubectl wait), the -app Secret's keys, the
// table, an event sent twice logged once and counted as a duplicate.
func TestGettingStartedRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	s := &system{opts: defaultOptions(), step: localstack.Steps(&progress, "docs"), cl: &proc.Cleanup{}}
	defer func() {
		s.cl.Run()
		if t.Failed() {
			t.Log(progress.String())
		}
	}()
	if err := s.build(ctx); err != nil {
		t.Fatal(err)
	}
	assets, err := localstack.ControlPlaneAssets(ctx, s.root, &progress)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	pg, superURL, err := localstack.StartPostgres(ctx, s.cl, "docs", nil, consumertest.WithTLS(ca, "127.0.0.1", "localhost"))
	if err != nil {
		t.Fatal(err)
	}
	s.pg = pg
	broker, err := localstack.StartBroker(ctx, s.cl, localstack.BrokerOptions{
		Name: "devbroker", Bin: filepath.Join(s.bin, "devbroker"), LogDir: s.work,
		Args: []string{"-data-dir", filepath.Join(s.work, "broker")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.startOperator(assets); err != nil {
		t.Fatal(err)
	}
	kubelet := &localstack.Kubelet{K8s: s.k8s, Binary: filepath.Join(s.bin, "consumer"), Work: s.work, Log: s.step}
	kctx, stopKubelet := context.WithCancel(ctx)
	kubeletDone := make(chan struct{})
	go func() { defer close(kubeletDone); kubelet.Run(kctx) }()
	s.cl.Add(func() { stopKubelet(); <-kubeletDone })

	r := newDocRunner(t, s, assets, broker.Addrs()[0], pg.Port())
	// The local API server reports a real version (hack/envtest.sh stamps
	// it), so kubectl version works as against a cluster.
	if out, err := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), "--kubeconfig", s.kubeconfig, "version").CombinedOutput(); err != nil {
		t.Fatalf("kubectl version against the local API server: %v\n%s", err, out)
	}
	r.sqlURLs = []string{superURL[:strings.LastIndex(superURL, "/")] + "/postgres?sslmode=disable",
		fmt.Sprintf("postgres://orders:change-me@127.0.0.1:%d/orders?sslmode=require", pg.Port())}

	blocks, err := mdBlocks(filepath.Join(s.root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	var sawLogs, sawSecret, sawTable bool
	for _, b := range blocks {
		out := r.block(ctx, "docs/getting-started.md", b)
		switch {
		case strings.Contains(b.text, "logs -l app.kubernetes.io/name=idempotent-consumer"):
			// "The event is logged once."
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], "order.created") && !strings.Contains(lines[0], "eventId") {
				t.Errorf("the event sent twice was logged %d times, want once:\n%s", len(lines), out)
			}
			sawLogs = true
			r.assertDuplicateCounted(ctx, kubelet)
		case strings.Contains(b.text, "get secret orders-service-app"):
			sawSecret = true
		case b.lang == "sql" && strings.Contains(b.text, `\d+`):
			if !strings.Contains(string(out), `Partitioned table "public.processed_event"`) {
				t.Errorf("psql does not show the partitioned table:\n%s", out)
			}
			sawTable = true
		}
	}
	if !sawLogs || !sawSecret || !sawTable {
		t.Errorf("the walk changed: logs step %t, Secret step %t, table step %t; update this test with it", sawLogs, sawSecret, sawTable)
	}
	r.readmeExample(ctx, kubelet)
	for _, l := range r.ran {
		t.Log(l)
	}
}
