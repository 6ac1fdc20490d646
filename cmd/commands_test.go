// Package cmd holds only this test: the commands live in its subdirectories.
package cmd

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestCommandsDoNotLinkTesting: no command built from cmd/ links the testing
// package (a test harness such as consumer/consumertest pulled into a
// production binary brings testing, its flags and PostgreSQL test drivers
// with it). Broker helpers a command needs live in internal/devkafka.
func TestCommandsDoNotLinkTesting(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module: skipped with -short")
	}
	const module = "github.com/idempotency-dev/operator"
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Name,Deps", "./...")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var commands []string
	for {
		var p struct {
			ImportPath, Name string
			Deps             []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Name != "main" || !strings.HasPrefix(p.ImportPath, module+"/cmd/") {
			continue
		}
		commands = append(commands, p.ImportPath)
		for _, forbidden := range []string{"testing", module + "/consumer/consumertest"} {
			if slices.Contains(p.Deps, forbidden) {
				t.Errorf("%s links %s", p.ImportPath, forbidden)
			}
		}
	}
	if len(commands) < 4 {
		t.Fatalf("checked only %d commands (%v); go list output looks wrong", len(commands), commands)
	}
	t.Logf("checked %v", commands)
}
