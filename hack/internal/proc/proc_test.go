package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGoroutinesOfAStuckProcess: a Go process blocked in this module's code
// dumps its goroutines on SIGQUIT, and the dump keeps the module's frames.
func TestGoroutinesOfAStuckProcess(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	prog := "package main\n\nimport \"time\"\n\nfunc stuckHere() { time.Sleep(time.Hour) }\n\nfunc main() { println(\"started\"); stuckHere() }\n"
	if err := os.WriteFile(src, []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "stuck")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p, err := Start("stuck", Options{LogDir: dir}, bin)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.TailLog(5), "started") {
		if time.Now().After(deadline) {
			t.Fatalf("the process did not start: %q", p.TailLog(5))
		}
		time.Sleep(10 * time.Millisecond)
	}
	dump := p.Goroutines(5 * time.Second)
	if !strings.Contains(dump, "[sleep]") || !strings.Contains(dump, "main.stuckHere") {
		t.Fatalf("dump lacks the main goroutine's state:\n%s", dump)
	}
	if !p.Exited() {
		t.Fatal("the process still runs after its dump")
	}
}
