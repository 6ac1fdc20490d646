package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestSweepStaleWorkDirs: the directory of a demo whose process is gone is
// removed; those of a live demo, or without a pid, are kept.
func TestSweepStaleWorkDirs(t *testing.T) {
	tmp := t.TempDir()
	// A pid that is certainly not running: a process that has exited and
	// been reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
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
	stale := mk("stale", strconv.Itoa(dead))
	// What a killed demo leaves running: the control plane's processes,
	// which name files inside its directory.
	logFile := filepath.Join(stale, "k8s_test_framework_1", "log")
	if err := os.WriteFile(logFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("tail", "-f", logFile)
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	t.Cleanup(func() { _ = orphan.Process.Kill() })
	live := mk("live", strconv.Itoa(os.Getpid()))
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
	if !slices.Equal(removed, []string{stale}) {
		t.Fatalf("removed %v, want only %s", removed, stale)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale directory still there (stat: %v)", err)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Fatal("the process using the stale directory exited by itself, not killed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process using the stale directory is still running")
	}
	for _, d := range []string{live, nopid, garbled, other} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s was removed: %v", d, err)
		}
	}
}

// TestMakeWorkDirRedirectsTMPDIR: while the demo runs, temporary files go
// into its own directory, which names its pid; TMPDIR is put back after.
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
	restore()
	if os.TempDir() != before {
		t.Fatalf("TMPDIR %s after restore, want %s", os.TempDir(), before)
	}
}
