// Package proc runs the child programs of the local demo and the chaos
// harness: each in its own process group, killed if the parent dies, its
// output kept in a log file (and optionally streamed with a name prefix).
package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idempotency-dev/operator/internal/syncbuf"
)

// Process is a running child program.
type Process struct {
	Name string
	Log  string // path of the combined stdout/stderr log

	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	stdout syncbuf.Buffer
}

// Options for Start.
type Options struct {
	Env       []string  // the whole environment; nil means the parent's
	LogDir    string    // where NAME.log goes
	Stream    io.Writer // if set, output is copied here with a "NAME | " prefix
	AppendLog bool      // append to an existing log (a restarted process)
}

// Start starts bin with args.
func Start(name string, o Options, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(o.LogDir, name+".log")
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if o.AppendLog {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logf, err := os.OpenFile(logPath, flags, 0o644) //nolint:gosec // G302: a development process's log, read by the developer
	if err != nil {
		return nil, err
	}
	p := &Process{Name: name, Log: logPath, done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Env = o.Env
	var out io.Writer = logf
	if o.Stream != nil {
		out = io.MultiWriter(logf, &prefixWriter{prefix: name + " | ", w: o.Stream})
	}
	cmd.Stderr = out
	cmd.Stdout = io.MultiWriter(out, &p.stdout)
	// Its own process group, and SIGKILL if the parent dies: nothing outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM, waits up to grace, then kills the process group.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill sends SIGKILL to the process group and waits for the exit.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process exits.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the exit error, valid after Done: nil for a clean exit.
func (p *Process) Err() error { return p.err }

// ExitErr is Err, but never nil after Done: a clean exit reads "exit status 0".
func (p *Process) ExitErr() error {
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

// TailLog returns the last n lines of the log, for error messages.
func (p *Process) TailLog(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitForLine waits until the process printed a stdout line starting with
// prefix and returns the rest of that line.
func (p *Process) WaitForLine(ctx context.Context, prefix string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) {
				return strings.TrimSpace(strings.TrimPrefix(sc.Text(), prefix)), nil
			}
		}
		if p.Exited() {
			return "", fmt.Errorf("%s exited before printing %q: %w\n%s", p.Name, prefix, p.ExitErr(), p.TailLog(20))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("%s printed no %q line within %s", p.Name, prefix, timeout)
}

type prefixWriter struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	part   []byte
}

func (pw *prefixWriter) Write(p []byte) (int, error) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.part = append(pw.part, p...)
	for {
		i := bytes.IndexByte(pw.part, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(pw.w, "%s%s\n", pw.prefix, pw.part[:i])
		pw.part = pw.part[i+1:]
	}
	return len(p), nil
}

// Cleanup runs registered functions in reverse order, once.
type Cleanup struct {
	mu  sync.Mutex
	fns []func()
}

// Add registers fn.
func (c *Cleanup) Add(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

// Run runs the registered functions, last first.
func (c *Cleanup) Run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// Build builds the module's commands into dir (CGO off, as in the images).
func Build(ctx context.Context, root, dir string, pkgs ...string) error {
	args := append([]string{"build", "-o", dir + string(os.PathSeparator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", strings.Join(pkgs, " "), err, b)
	}
	return nil
}

// FindRoot walks up from the working directory to the module root (go.mod).
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "cmd")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no module root above the working directory")
		}
		dir = parent
	}
}

// Goroutines makes a stuck Go process print its goroutines and exit
// (SIGQUIT), and returns the dump, shortened to each goroutine's state and
// the frames of this module (and package main), kafka-go and pgx: where it
// was stuck. It kills
// the process if it has not exited after grace.
func (p *Process) Goroutines(grace time.Duration) string {
	if p.Exited() {
		return "(exited)"
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
	b, _ := os.ReadFile(p.Log)
	s := string(b)
	i := strings.Index(s, "\ngoroutine ")
	if i < 0 {
		return "(no goroutine dump in the log)"
	}
	var out []string
	for _, line := range strings.Split(s[i+1:], "\n") {
		switch {
		case strings.HasPrefix(line, "goroutine "):
			out = append(out, line)
		case strings.HasPrefix(line, "\t"):
			continue // file:line of the frame above
		case strings.HasPrefix(line, "main.") || strings.Contains(line, "idempotency-dev/operator") || strings.Contains(line, "segmentio/kafka-go") || strings.Contains(line, "jackc/pgx"):
			out = append(out, "  "+line)
		}
	}
	return strings.Join(out, "\n")
}
