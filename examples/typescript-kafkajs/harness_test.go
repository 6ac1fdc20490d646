package typescriptkafkajs_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// broker is the project's Kafka-protocol test broker (kfake) and the helpers
// this test uses on it. Every use of the project's broker helpers
// (consumertest) is here, so moving them changes this type only.
type broker struct{ addrs []string }

// startBroker starts a broker that stops when the test ends.
func startBroker(t *testing.T) *broker {
	t.Helper()
	return &broker{addrs: consumertest.NewKafka(t).Brokers()}
}

func (b *broker) createTopic(ctx context.Context, topic string, partitions int) error {
	return consumertest.CreateTopic(ctx, b.addrs, topic, partitions, nil)
}

// writer is a synchronous acks=all writer; a message's Partition field picks
// its partition when it has no key.
func (b *broker) writer(topic string) *kafka.Writer { return consumertest.NewWriter(b.addrs, topic) }

// lag is the group's uncommitted records on topic (a partition without a
// commit counts from 0).
func (b *broker) lag(ctx context.Context, group, topic string, partitions int) (int64, error) {
	return consumertest.GroupLag(ctx, b.addrs, group, topic, partitions)
}

func (b *broker) endOffsets(ctx context.Context, topic string, partitions int) (map[int]int64, error) {
	return consumertest.EndOffsets(ctx, b.addrs, topic, partitions)
}

// requireNode returns the paths of node and npm. Without them the test
// skips, except under CI, where .ci/run installs them and a skip would hide
// that the example was never run.
func requireNode(t *testing.T) (node, npm string) {
	t.Helper()
	node, nerr := exec.LookPath("node")
	npm, perr := exec.LookPath("npm")
	if nerr != nil || perr != nil {
		msg := "node and npm (Node.js 20) are needed to build and run the TypeScript example; install them (Debian: apt-get install nodejs npm)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI must have them (.ci/run installs them)")
		}
		t.Skip(msg)
	}
	return node, npm
}

// buildExample compiles the example into a temporary directory and returns
// it: the sources are copied there, node_modules is the locked dependency set
// (npmInstall), and tsc writes dist/ there. Nothing generated lands in the
// source tree, and node_modules never sits inside the Go module.
func buildExample(ctx context.Context, node, npm, tmp string) (string, error) {
	modules, err := npmInstall(ctx, npm)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(tmp, "example")
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		return "", err
	}
	files := []string{"package.json", "package-lock.json", "tsconfig.json"}
	entries, err := os.ReadDir("src")
	if err != nil {
		return "", fmt.Errorf("reading src: %w", err)
	}
	for _, e := range entries {
		files = append(files, filepath.Join("src", e.Name()))
	}
	for _, f := range files {
		if err := copyFile(f, filepath.Join(dir, f)); err != nil {
			return "", err
		}
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		return "", err
	}
	return dir, run(ctx, dir, node, "node_modules/typescript/bin/tsc", "-p", ".")
}

// npmInstall runs npm ci (exactly package-lock.json) once per lock file and
// returns the node_modules directory. It is kept in the user's cache directory
// under the lock file's hash, like the envtest control plane, so a run after
// the first takes no time here; a changed lock file gets a fresh install.
func npmInstall(ctx context.Context, npm string) (string, error) {
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory: %w", err)
	}
	sum := sha256.Sum256(lock)
	base := filepath.Join(cache, "idempotent-consumer-operator", "examples-typescript-kafkajs")
	final := filepath.Join(base, hex.EncodeToString(sum[:8]))
	modules := filepath.Join(final, "node_modules")
	if _, err := os.Stat(modules); err == nil {
		return modules, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(base, "install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // nothing left after the rename
	for _, f := range []string{"package.json", "package-lock.json"} {
		if err := copyFile(f, filepath.Join(tmp, f)); err != nil {
			return "", err
		}
	}
	if err := run(ctx, tmp, npm, "ci", "--prefer-offline", "--loglevel=error"); err != nil {
		return "", err
	}
	// Atomic: a concurrent run either finds the whole directory or renames
	// its own; a lost race leaves the winner's in place.
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(modules); serr != nil {
			return "", fmt.Errorf("keeping node_modules: %w", err)
		}
	}
	return modules, nil
}

// run runs a command in dir; its output is returned in the error.
func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// No update notices, audit or funding requests: only the install.
	cmd.Env = append(os.Environ(), "NPM_CONFIG_UPDATE_NOTIFIER=false", "NPM_CONFIG_FUND=false", "NPM_CONFIG_AUDIT=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("copying %s: %w", from, err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		return fmt.Errorf("copying %s: %w", from, err)
	}
	return nil
}

// provider is a payment provider with Stripe-like idempotency keys, scoped
// per account (one account per consumer group): the first request with a key
// applies the charge, a later one returns the first result and charges
// nothing. It records every request, so the test sees both what was charged
// (the keys) and how often the consumer got as far as charging (requests per
// key: more than one means the event was applied again, which only a crash
// between the charge and the database commit may cause).
type provider struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests map[string]map[string]int // account -> key -> requests
	hold     *holdSpec
	rejected map[string]bool // keys answered 422 (a charge the provider refuses for good)
}

// reject makes the provider answer every charge with key 422 Unprocessable
// Entity, as a provider does for a closed account: retrying cannot help.
func (p *provider) reject(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rejected == nil {
		p.rejected = map[string]bool{}
	}
	p.rejected[key] = true
}

// holdSpec makes the provider hold the response to the n-th charge applied for
// account: the charge is recorded, then the handler signals held and waits for
// release before answering. The test kills the consumer in between.
type holdSpec struct {
	account string
	n       int
	key     string
	held    chan string
	release chan struct{}
}

func newProvider(t *testing.T) *provider {
	p := &provider{requests: map[string]map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.mu.Lock()
		if h := p.hold; h != nil {
			select {
			case <-h.release:
			default:
				close(h.release)
			}
		}
		p.mu.Unlock()
		p.srv.Close()
	})
	return p
}

// url is the charge endpoint of account.
func (p *provider) url(account string) string { return p.srv.URL + "/" + account + "/charges" }

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if r.Method != http.MethodPost || len(parts) != 2 || parts[1] != "charges" {
		http.Error(w, "POST /<account>/charges", http.StatusNotFound)
		return
	}
	account, key := parts[0], r.Header.Get("Idempotency-Key")
	var body struct {
		Account     string `json:"account"`
		AmountCents int64  `json:"amountCents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || key == "" || body.AmountCents <= 0 {
		http.Error(w, "want an Idempotency-Key header and a JSON body with amountCents > 0", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	byKey := p.requests[account]
	if byKey == nil {
		byKey = map[string]int{}
		p.requests[account] = byKey
	}
	byKey[key]++
	if p.rejected[key] {
		p.mu.Unlock()
		http.Error(w, "account closed", http.StatusUnprocessableEntity)
		return
	}
	first := byKey[key] == 1
	var h *holdSpec
	if first && p.hold != nil && p.hold.account == account && p.hold.key == "" && len(byKey) == p.hold.n {
		h = p.hold
		h.key = key
	}
	p.mu.Unlock()
	if h != nil {
		h.held <- key
		<-h.release
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"ch_%s","replayed":%t}`+"\n", key, !first)
}

// holdNth arms the provider to hold the n-th charge applied for account.
func (p *provider) holdNth(account string, n int) *holdSpec {
	h := &holdSpec{account: account, n: n, held: make(chan string, 1), release: make(chan struct{})}
	p.mu.Lock()
	p.hold = h
	p.mu.Unlock()
	return h
}

// snapshot copies account's requests per key.
func (p *provider) snapshot(account string) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.requests[account] {
		out[k] = v
	}
	return out
}

// proc is one node consumer process; its output goes to a file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProc(t *testing.T, node, dir, name string, env map[string]string) *proc {
	t.Helper()
	return startNode(t, node, dir, "dist/consumer.js", name, env)
}

// startNode runs script (relative to dir) with node.
func startNode(t *testing.T, node, dir, script, name string, env map[string]string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	// Dies with the test binary; own process group for kill -9.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	f.Close()
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill9()
		if t.Failed() {
			t.Logf("--- %s output (tail) ---\n%s", name, p.tail(4000))
		}
	})
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill9 kills the process with SIGKILL: no shutdown hook runs.
func (p *proc) kill9() {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill9()
		t.Fatalf("%s did not stop within 30s of SIGTERM\n%s", p.name, p.tail(4000))
	}
	if p.err != nil {
		t.Fatalf("%s exited with %v\n%s", p.name, p.err, p.tail(4000))
	}
}

// stopAll stops the processes at once (a kafkajs consumer takes a moment to
// leave its group).
func stopAll(t *testing.T, ps ...*proc) {
	t.Helper()
	for _, p := range ps {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		p.stop(t)
	}
}

func (p *proc) output() []byte {
	b, _ := os.ReadFile(p.log)
	return b
}

func (p *proc) tail(n int) string {
	b := p.output()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// logLine is one JSON line of the consumer's output.
type logLine struct {
	Level  string         `json:"level"`
	Msg    string         `json:"msg"`
	Counts map[string]int `json:"counts"`
	Reason string         `json:"reason"`
}

func (p *proc) lines() []logLine {
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(p.output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg != "" {
			out = append(out, l)
		}
	}
	return out
}

// logged reports whether the process printed a line with message msg.
func (p *proc) logged(msg string) bool {
	for _, l := range p.lines() {
		if l.Msg == msg {
			return true
		}
	}
	return false
}

// lastCounts is the process's last "counts" line.
func (p *proc) lastCounts() map[string]int {
	var c map[string]int
	for _, l := range p.lines() {
		if l.Msg == "counts" {
			c = l.Counts
		}
	}
	return c
}

// runPitfall runs dist/pitfall.js and decodes its one line of output.
func runPitfall(t *testing.T, node, dir string, env map[string]string) map[string]map[string]int {
	t.Helper()
	cmd := exec.Command(node, "dist/pitfall.js")
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pitfall.js: %v\n%s", err, stderr.String())
	}
	var res map[string]map[string]int
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("pitfall.js printed %q: %v", out, err)
	}
	return res
}

// waitFor polls cond until it returns true or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var lastErr error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last error: %v)", d, what, lastErr)
}

// dedupctl is cmd/dedupctl, built for this test, on one database.
type dedupctl struct {
	t   *testing.T
	ctx context.Context
	bin string
	dsn string
}

// buildDedupctl builds cmd/dedupctl into dir.
func buildDedupctl(t *testing.T, ctx context.Context, dir, dsn string) *dedupctl {
	t.Helper()
	bin := filepath.Join(dir, "dedupctl")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/idempotency-dev/operator/cmd/dedupctl")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/dedupctl: %v\n%s", err, out)
	}
	return &dedupctl{t: t, ctx: ctx, bin: bin, dsn: dsn}
}

// run runs dedupctl with the URL in DATABASE_URL (never a flag) and returns
// its standard output; a failure fails the test.
func (d *dedupctl) run(args ...string) string {
	d.t.Helper()
	cmd := exec.CommandContext(d.ctx, d.bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+d.dsn)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		d.t.Fatalf("dedupctl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// shownWindow is the window dedupctl show --json reports.
type shownWindow struct {
	From time.Time `json:"windowFrom"`
	To   time.Time `json:"windowTo"`
}

func (w shownWindow) String() string {
	return "[" + w.From.Format(time.RFC3339) + ", " + w.To.Format(time.RFC3339) + ")"
}

// window is the table's window as dedupctl show reports it.
func (d *dedupctl) window() shownWindow {
	d.t.Helper()
	out := d.run("show", "--schema", table.Schema, "--table", table.Name, "--json")
	var w shownWindow
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		d.t.Fatalf("dedupctl show --json: %v\n%s", err, out)
	}
	return w
}
