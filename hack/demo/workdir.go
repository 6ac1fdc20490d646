package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
// PostgreSQL cluster, the Go build's scratch files. The directory holds
// demo.pid, with the demo's pid, locked (flock) for as long as the demo
// runs. A demo that is killed with SIGKILL (its own children die with it,
// through Pdeathsig) leaves the directory with the lock released, and the
// next demo removes it (see sweepStaleWorkDirs). The returned restore puts
// TMPDIR back and releases the lock.
func makeWorkDir() (dir string, restore func(), err error) {
	dir, err = os.MkdirTemp("", workDirPattern)
	if err != nil {
		return "", nil, err
	}
	fail := func(err error) (string, func(), error) {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	// Locked before it is named demo.pid, so a sweeper never sees it
	// unlocked while this demo runs.
	tmp := filepath.Join(dir, pidFile+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fail(fmt.Errorf("locking %s: %w", tmp, err))
	}
	if _, err := fmt.Fprintf(f, "%d\n", os.Getpid()); err != nil {
		f.Close()
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, pidFile)); err != nil {
		f.Close()
		return fail(err)
	}
	// PostgreSQL runs as another user when the demo runs as root: it must be
	// able to reach its cluster directory inside, not to list this one.
	if err := os.Chmod(dir, 0o711); err != nil { //nolint:gosec // G302: a directory: the postgres user must traverse it to its own data directory
		f.Close()
		return fail(err)
	}
	old, had := os.LookupEnv("TMPDIR")
	if err := os.Setenv("TMPDIR", dir); err != nil {
		f.Close()
		return fail(err)
	}
	return dir, func() {
		if had {
			_ = os.Setenv("TMPDIR", old)
		} else {
			_ = os.Unsetenv("TMPDIR")
		}
		_ = f.Close() // releases the lock
	}, nil
}

// sweepStaleWorkDirs removes the working directories in tmp left by demos
// that are no longer running (killed before they could clean up), and
// returns what it removed. A demo's directory is stale when the lock on its
// demo.pid is free: the kernel releases it when the demo dies, whatever
// PID namespace looks at it, and a reused pid cannot fake it. A directory
// without a demo.pid naming a pid is left alone. The processes the demo
// started itself die with it (Pdeathsig), but the envtest control plane's
// etcd and kube-apiserver, started by controller-runtime, outlive it: the
// processes of the directory's owner whose command line names a path
// inside it are killed first.
func sweepStaleWorkDirs(tmp string) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(tmp, workDirPattern+"*"))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, d := range dirs {
		stale, release := staleWorkDir(d)
		if !stale {
			continue
		}
		err := killProcessesUsing(d)
		if err == nil {
			err = os.RemoveAll(d)
		}
		release()
		if err != nil {
			errs = append(errs, fmt.Errorf("removing the stale demo directory %s: %w", d, err))
			continue
		}
		removed = append(removed, d)
	}
	return removed, errors.Join(errs...)
}

// staleWorkDir reports whether d is a demo directory whose demo is gone, and
// then holds its lock until release is called.
func staleWorkDir(d string) (stale bool, release func()) {
	f, err := os.Open(filepath.Join(d, pidFile))
	if err != nil {
		return false, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || perr != nil || pid <= 0 {
		f.Close()
		return false, nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close() // held: that demo is running
		return false, nil
	}
	return true, func() { f.Close() }
}

// killProcessesUsing sends SIGKILL to every process of dir's owner with a
// command-line argument that is dir or a path inside it (or a --flag= with
// such a value), and waits (up to 10 s) for them to be gone.
func killProcessesUsing(dir string) error {
	owner, err := ownerOf(dir)
	if err != nil {
		return err
	}
	names := func(arg string) bool {
		if strings.HasPrefix(arg, "-") {
			if _, v, ok := strings.Cut(arg, "="); ok {
				arg = v
			}
		}
		return arg == dir || strings.HasPrefix(arg, dir+string(os.PathSeparator))
	}
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return err
	}
	var pids []int
	for _, f := range cmdlines {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if uid, err := ownerOf(filepath.Dir(f)); err != nil || uid != owner {
			continue // exited meanwhile, or another user's
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(strings.Split(string(b), "\x00"), names) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				pids = append(pids, pid)
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

// ownerOf is the uid owning path (for /proc/<pid>, the process's).
func ownerOf(path string) (uint32, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("no owner for %s on this system", path)
	}
	return st.Uid, nil
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

// processAlive reports whether pid names a running process (EPERM: one of
// another user's, alive too).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
