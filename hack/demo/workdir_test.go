package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSweepStaleWorkDirs: a demo directory whose demo.pid is not locked is
// removed, with the processes still using it, whatever its pid says (a pid
// can be reused, or alive in another PID namespace); a locked one is kept
// even when its pid looks dead, and so are directories without a pid.
func TestSweepStaleWorkDirs(t *testing.T) {
	tmp := t.TempDir()
	// A pid that is certainly not running: a process that has exited and
	// been reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(cmd.Process.Pid)
	mk := func(name, pid string) string {
		d := filepath.Join(tmp, workDirPattern+name)
		if err := os.MkdirAll(filepath.Join(d, "k8s_test_framework_1"), 0o700); err != nil {
			t.Fatal(err)
		}
		if pid != "" {
			if err := os.WriteFile(filepath.Join(d, pidFile), []byte(pid+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	// runUsing starts a process that names a file in dir, as the control
	// plane left by a killed demo does, and returns a channel that gets its
	// exit.
	runUsing := func(dir string) <-chan error {
		logFile := filepath.Join(dir, "k8s_test_framework_1", "log")
		if err := os.WriteFile(logFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		p := exec.Command("tail", "-f", logFile)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- p.Wait() }()
		t.Cleanup(func() { _ = p.Process.Kill() })
		return exited
	}
	stale := mk("stale", dead)
	staleUser := runUsing(stale)
	reused := mk("reused", strconv.Itoa(os.Getpid()))
	// A live demo whose pid means nothing here (another PID namespace
	// sharing this directory): its lock says it runs.
	live := mk("live", dead)
	lock, err := os.Open(filepath.Join(live, pidFile))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	// A name that extends the stale one: not inside it.
	neighbour := mk("stale2", "")
	neighbourUser := runUsing(neighbour)
	nopid := mk("nopid", "")
	garbled := mk("garbled", "not-a-pid")
	other := filepath.Join(tmp, "someone-elses")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}

	removed, err := sweepStaleWorkDirs(tmp)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{reused, stale}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, d := range []string{stale, reused} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("stale directory %s still there (stat: %v)", d, err)
		}
	}
	select {
	case err := <-staleUser:
		if err == nil {
			t.Fatal("the process using the stale directory exited by itself, not killed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process using the stale directory is still running")
	}
	select {
	case err := <-neighbourUser:
		t.Fatalf("a process using %s, outside the stale directory, was killed: %v", neighbour, err)
	default:
	}
	for _, d := range []string{live, neighbour, nopid, garbled, other} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s was removed: %v", d, err)
		}
	}
}

// TestMakeWorkDirRedirectsTMPDIR: while the demo runs, temporary files go
// into its own directory, which names its pid under a lock; TMPDIR is put
// back, and the lock released, after.
func TestMakeWorkDirRedirectsTMPDIR(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	before := os.TempDir()
	dir, restore, err := makeWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if filepath.Dir(dir) != before || os.TempDir() != dir {
		t.Fatalf("work dir %s under %s, TMPDIR now %s; want a new dir under %s as TMPDIR", dir, filepath.Dir(dir), os.TempDir(), before)
	}
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil || string(b) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("pid file %q (err %v), want this process's pid", b, err)
	}
	if stale, _ := staleWorkDir(dir); stale {
		t.Fatal("a running demo's directory looks stale: demo.pid is not locked")
	}
	restore()
	stale, release := staleWorkDir(dir)
	if !stale {
		t.Fatal("after restore the directory still looks in use: the lock was not released")
	}
	release()
	if os.TempDir() != before {
		t.Fatalf("TMPDIR %s after restore, want %s", os.TempDir(), before)
	}
}
