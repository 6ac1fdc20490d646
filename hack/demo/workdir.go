package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// workDirPattern names the demo's working directories in the temp dir.
const workDirPattern = "icop-demo-"

// pidFile, in a working directory, holds the pid of the demo that owns it.
const pidFile = "demo.pid"

// makeWorkDir creates the demo's working directory and makes it the process's
// TMPDIR, so that everything the demo starts puts its files there: the
// envtest control plane's directories (etcd data, certificates), the
// PostgreSQL cluster, the Go build's scratch files. A demo that is killed
// with SIGKILL (its children die with it, through Pdeathsig) then leaves one
// directory behind, with its pid in it, which the next demo removes (see
// sweepStaleWorkDirs). The returned restore puts TMPDIR back.
func makeWorkDir() (dir string, restore func(), err error) {
	dir, err = os.MkdirTemp("", workDirPattern)
	if err != nil {
		return "", nil, err
	}
	fail := func(err error) (string, func(), error) {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return fail(err)
	}
	// PostgreSQL runs as another user when the demo runs as root: it must be
	// able to reach its cluster directory inside, not to list this one.
	if err := os.Chmod(dir, 0o711); err != nil {
		return fail(err)
	}
	old, had := os.LookupEnv("TMPDIR")
	if err := os.Setenv("TMPDIR", dir); err != nil {
		return fail(err)
	}
	return dir, func() {
		if had {
			_ = os.Setenv("TMPDIR", old)
		} else {
			_ = os.Unsetenv("TMPDIR")
		}
	}, nil
}

// sweepStaleWorkDirs removes the working directories in tmp left by demos
// that are no longer running (killed before they could clean up), and
// returns what it removed. A directory without a readable pid, or whose
// process is alive, is left alone. The processes the demo started itself
// die with it (Pdeathsig), but the envtest control plane's etcd and
// kube-apiserver, started by controller-runtime, outlive it: any process
// whose command line names a path inside a stale directory is killed first.
func sweepStaleWorkDirs(tmp string) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(tmp, workDirPattern+"*"))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, pidFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if err := killProcessesUsing(d); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing the stale demo directory %s: %w", d, err))
			continue
		}
		removed = append(removed, d)
	}
	return removed, errors.Join(errs...)
}

// processAlive reports whether pid names a running process (EPERM: one of
// another user's, alive too).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// killProcessesUsing sends SIGKILL to every process whose command line has
// an argument naming dir or a path inside it, and waits (up to 10 s) for
// them to be gone.
func killProcessesUsing(dir string) error {
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return err
	}
	var pids []int
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if strings.Contains(arg, dir+string(os.PathSeparator)) || strings.HasSuffix(arg, dir) {
				if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for processAlive(pid) && !isZombie(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d, using the stale demo directory %s, survived SIGKILL", pid, dir)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// isZombie reports whether pid has exited and waits for its parent to reap
// it (it holds no files any more).
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain spaces or parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
