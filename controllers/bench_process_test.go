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
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// operatorProcess is cmd/manager built from this tree and run as a process
// of its own against the benchmark's API server (OPERATOR_BENCH_PROCESS):
// its peak RSS and CPU are the operator's alone, without the harness that
// shares the test process (the API client, the in-process broker, the
// stand-in Deployment controller).
type operatorProcess struct {
	cmd     *exec.Cmd
	metrics string // URL of its /metrics (plain HTTP on loopback)
	log     string
}

func startOperatorProcess(t *testing.T, te *testEnv, workers, conns int) *operatorProcess {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/manager").CombinedOutput(); err != nil {
		t.Fatalf("building cmd/manager: %v\n%s", err, out)
	}
	user, err := te.cfg.AddUser(envtest.User{Name: "bench-operator", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := consumertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	op := &operatorProcess{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), log: filepath.Join(dir, "manager.log")}
	logf, err := os.Create(op.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// The flags are those of the in-process benchmark's options.
	op.cmd = exec.Command(bin,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port), "--metrics-secure=false", "--health-probe-bind-address=0",
		"--consumer-image=registry.example/consumer:bench", "--retry-base=5s", "--retry-max=5m", "--max-requeue=24h",
		fmt.Sprintf("--max-concurrent-reconciles=%d", workers), fmt.Sprintf("--database-max-conns=%d", conns))
	op.cmd.Env = append(os.Environ(), "KUBECONFIG="+kcPath)
	op.cmd.Stdout, op.cmd.Stderr = logf, logf
	op.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := op.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = op.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = op.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = op.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			if log, err := os.ReadFile(op.log); err == nil {
				t.Logf("manager log (last 4000 bytes):\n%s", tailBytes(log, 4000))
			}
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		if _, _, err := op.reconciles(); err == nil {
			return op
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(op.log)
			t.Fatalf("cmd/manager exited at start:\n%s", tailBytes(log, 4000))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cmd/manager's metrics did not answer within 1m")
		}
	}
}

// reconciles reads the manager's count of reconciles of our controller and
// their summed wall time from its metrics endpoint.
func (op *operatorProcess) reconciles() (count, seconds float64, err error) {
	resp, err := http.Get(op.metrics)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET %s: %s", op.metrics, resp.Status)
	}
	ours := `controller="` + ControllerName + `"`
	err = scanSamples(resp.Body, func(name, labels string, v float64) {
		if !strings.Contains(labels, ours) {
			return
		}
		switch name {
		case "controller_runtime_reconcile_total":
			count += v
		case "controller_runtime_reconcile_time_seconds_sum":
			seconds += v
		}
	})
	return count, seconds, err
}

// peakRSSMiB is the process's high-water mark of resident memory (VmHWM).
func (op *operatorProcess) peakRSSMiB(t *testing.T) float64 { return op.statusMiB(t, "VmHWM") }

// rssMiB is the process's resident memory now (VmRSS).
func (op *operatorProcess) rssMiB(t *testing.T) float64 { return op.statusMiB(t, "VmRSS") }

// statusMiB reads a memory field (in kB) of /proc/<pid>/status, in MiB.
func (op *operatorProcess) statusMiB(t *testing.T, field string) float64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", op.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				t.Fatalf("parsing %q: %v", line, err)
			}
			return kb / 1024
		}
	}
	t.Fatalf("no %s in /proc/<pid>/status", field)
	return 0
}

// scanSamples calls fn for every sample line of a Prometheus text
// exposition, a line at a time (the API server's is some MiB).
func scanSamples(r io.Reader, fn func(name, labels string, v float64)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels := line, ""
		var value string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			end := strings.LastIndexByte(line, '}')
			if end < i {
				return fmt.Errorf("unexpected metrics line %q", line)
			}
			name, labels, value = line[:i], line[i+1:end], line[end+1:]
		} else if f := strings.Fields(line); len(f) >= 2 {
			name, value = f[0], f[1]
		}
		v, err := strconv.ParseFloat(strings.Fields(value + " x")[0], 64)
		if err != nil {
			return fmt.Errorf("unexpected metrics line %q", line)
		}
		fn(name, labels, v)
	}
	return sc.Err()
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
