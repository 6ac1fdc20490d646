package docscheck_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

const root = "../.."

// ours are the project's binaries whose flags the docs mention.
var ours = []string{"manager", "consumer", "dedup-migrate", "dedupctl"}

// documents are the files checked.
func documents(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "config/samples/README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	var out []string
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			out = append(out, f)
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %v to check", out)
	}
	return out
}

// facts is what exists.
type facts struct {
	targets map[string]bool
	flags   map[string]map[string]bool // binary -> flag names
	any     map[string]bool            // union of flags
	env     map[string]bool            // CONSUMER_* and other variables something reads
}

var flagLine = regexp.MustCompile(`(?m)^\s+-{1,2}([a-zA-Z0-9][a-zA-Z0-9-]*)\b`)
var envInUsage = regexp.MustCompile(`\[\$([A-Z][A-Z0-9_]*)\]`)

func gather(t *testing.T) facts {
	t.Helper()
	f := facts{targets: map[string]bool{}, flags: map[string]map[string]bool{}, any: map[string]bool{}, env: map[string]bool{}}

	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:([^=]|$)`).FindAllStringSubmatch(string(mk), -1) {
		f.targets[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Z0-9_]*)\s*[:?+]?=`).FindAllStringSubmatch(string(mk), -1) {
		f.env[m[1]] = true
	}
	if !f.targets["test"] || !f.targets["demo"] {
		t.Fatalf("parsed Makefile targets %v lack test and demo", f.targets)
	}

	// The binaries as built from this tree, with `make build`'s settings
	// (-trimpath, no cgo), so the compiled packages are shared with
	// hack/release's test.
	bin := t.TempDir()
	pkgs := []string{"build", "-trimpath", "-o", bin + string(filepath.Separator)}
	for _, b := range ours {
		pkgs = append(pkgs, "./cmd/"+b)
	}
	build := exec.Command("go", pkgs...)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, b := range ours {
		cmd := exec.Command(filepath.Join(bin, b), "-h")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		out, _ := cmd.CombinedOutput() // -h exits 0 or 2 depending on the flag package's mode
		set := map[string]bool{}
		for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
			set[m[1]] = true
		}
		if len(set) < 3 {
			t.Fatalf("%s -h listed %d flags:\n%s", b, len(set), out)
		}
		for _, m := range envInUsage.FindAllStringSubmatch(string(out), -1) {
			f.env[m[1]] = true
		}
		// cmd/consumer's subcommands have flags of their own.
		if b == "consumer" {
			for _, name := range []string{"dead-letters", "outbox-relay"} {
				sub := exec.Command(filepath.Join(bin, b), name, "-h")
				sub.Env = cmd.Env
				out, _ := sub.CombinedOutput()
				for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
					set[m[1]] = true
				}
				for _, m := range envInUsage.FindAllStringSubmatch(string(out), -1) {
					f.env[m[1]] = true
				}
			}
		}
		// --version may be handled before the flag set (cmd/consumer): probe it.
		if out, err := exec.Command(filepath.Join(bin, b), "--version").Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
			set["version"] = true
		}
		f.flags[b] = set
		for k := range set {
			f.any[k] = true
		}
	}
	if !f.env["CONSUMER_DATABASE_URL"] {
		t.Fatal("consumer -h names no CONSUMER_DATABASE_URL; the usage format changed?")
	}

	// Variables that tests and scripts read (CONSUMER_BENCH, ...).
	getenv := regexp.MustCompile(`os\.(?:Getenv|LookupEnv)\("([A-Z][A-Z0-9_]*)"\)`)
	shellVar := regexp.MustCompile(`\$\{?([A-Z][A-Z0-9_]*)|\b([A-Z][A-Z0-9_]*)=`)
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		switch {
		case strings.HasSuffix(path, ".go"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range getenv.FindAllStringSubmatch(string(b), -1) {
				f.env[m[1]] = true
			}
		case strings.HasSuffix(path, ".sh"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range shellVar.FindAllStringSubmatch(string(b), -1) {
				f.env[m[1]+m[2]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A mention is something a document claims exists, with its location.
type mention struct {
	where string
	kind  string // "target", "flag", "env"
	name  string
	of    string // for flags: the binary, or "" for any of ours
}

var (
	spanRE     = regexp.MustCompile("`([^`]+)`")
	longFlag   = regexp.MustCompile(`(?:^|[\s("'\[=,])--([a-z][a-z0-9-]*)`)
	yamlArg    = regexp.MustCompile(`^\s*(?:-|value:)\s+["']?--([a-z][a-z0-9-]*)`)
	envName    = regexp.MustCompile(`\bCONSUMER_[A-Z0-9_]*\*?`)
	assignment = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=\S*$`)
	command    = regexp.MustCompile(`^[a-z][a-z0-9._/-]*$`)
)

// binary says which of ours a command word runs ("", false if none).
func binary(word string) (string, bool) {
	base := filepath.Base(word)
	for _, b := range ours {
		if base == b {
			return b, true
		}
	}
	return "", false
}

// words splits a command segment, dropping leading VAR=value and sudo.
func words(seg string) []string {
	w := strings.Fields(seg)
	for len(w) > 0 && (assignment.MatchString(w[0]) || w[0] == "sudo" || w[0] == "$" || w[0] == "env") {
		w = w[1:]
	}
	return w
}

// scanCommand records the mentions in one shell command segment and returns
// its context: the binary it runs, "make", "external" or "".
func scanCommand(where, seg string, add func(mention)) string {
	w := words(seg)
	if len(w) == 0 {
		return ""
	}
	if w[0] == "make" {
		for _, x := range w[1:] {
			if strings.HasPrefix(x, "-") || strings.Contains(x, "=") {
				continue
			}
			x = strings.Trim(x, ".,)")
			if x == "" || !regexp.MustCompile(`^[a-z][a-z0-9_-]*$`).MatchString(x) {
				break
			}
			add(mention{where, "target", x, ""})
		}
		return "make"
	}
	if b, ok := binary(w[0]); ok {
		for _, m := range longFlag.FindAllStringSubmatch(seg, -1) {
			add(mention{where, "flag", m[1], b})
		}
		return b
	}
	if strings.HasPrefix(w[0], "--") {
		return "" // a bare flag: the caller decides whose
	}
	if command.MatchString(w[0]) {
		return "external" // kubectl, kafka-topics.sh, go, ...: not ours to check
	}
	return ""
}

// listItem starts a Markdown list item: a bullet or a number.
var listItem = regexp.MustCompile(`^([-*+]|[0-9]+\.) `)

// segments splits a shell line into commands.
func segments(line string) []string {
	return regexp.MustCompile(`\|\||&&|[|;]|\$\(`).Split(line, -1)
}

func scan(t *testing.T, dir, file string) []mention {
	t.Helper()
	fh, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []mention
	add := func(m mention) { out = append(out, m) }
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inCode, n := false, 0
	context := "" // the last command seen in this paragraph
	pending := "" // a code line continued with a backslash
	for sc.Scan() {
		n++
		line := sc.Text()
		where := fmt.Sprintf("%s:%d", file, n)
		for _, m := range envName.FindAllString(line, -1) {
			add(mention{where, "env", m, ""})
		}
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inCode, context, pending = !inCode, "", ""
			continue
		}
		if inCode {
			if m := yamlArg.FindStringSubmatch(line); m != nil {
				add(mention{where, "flag", m[1], ""})
				continue
			}
			full := pending + line
			if strings.HasSuffix(strings.TrimSpace(line), `\`) {
				pending = strings.TrimSuffix(strings.TrimSpace(full), `\`) + " "
				continue
			}
			pending = ""
			if i := strings.Index(full, " #"); i >= 0 {
				full = full[:i] // a shell comment
			}
			for _, seg := range segments(full) {
				scanCommand(where, seg, add)
			}
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "|") || strings.HasPrefix(trimmed, "#") || listItem.MatchString(trimmed) {
			context = "" // a new paragraph; every table row, heading and list item stands alone
		}
		for _, sp := range spanRE.FindAllStringSubmatch(line, -1) {
			span := sp[1]
			w := words(span)
			if len(w) > 0 && strings.HasPrefix(w[0], "--") {
				// A bare flag belongs to the command this paragraph last named.
				switch context {
				case "external", "make":
				default:
					for _, m := range longFlag.FindAllStringSubmatch(" "+span, -1) {
						add(mention{where, "flag", m[1], context})
					}
				}
				continue
			}
			if c := scanCommand(where, span, add); c != "" {
				context = c
				continue
			}
			// Anything else quoted (an error message, a setting): its flags
			// are ours.
			for _, m := range longFlag.FindAllStringSubmatch(span, -1) {
				add(mention{where, "flag", m[1], ""})
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// check returns the mentions in files (relative to dir) that name nothing
// that exists, and counts the mentions by kind.
func check(t *testing.T, f facts, dir string, files []string) (problems []string, counts map[string]int) {
	t.Helper()
	counts = map[string]int{}
	for _, file := range files {
		for _, m := range scan(t, dir, file) {
			counts[m.kind]++
			switch m.kind {
			case "target":
				if !f.targets[m.name] {
					problems = append(problems, fmt.Sprintf("%s: `make %s`: the Makefile has no target %s", m.where, m.name, m.name))
				}
			case "flag":
				if m.of != "" && !f.flags[m.of][m.name] {
					problems = append(problems, fmt.Sprintf("%s: %s has no flag --%s (it has %v)", m.where, m.of, m.name, sorted(f.flags[m.of])))
				} else if m.of == "" && !f.any[m.name] {
					problems = append(problems, fmt.Sprintf("%s: --%s is a flag of none of %v", m.where, m.name, ours))
				}
			case "env":
				name, pattern := strings.CutSuffix(m.name, "*")
				ok := f.env[name] && !pattern
				if pattern || strings.HasSuffix(name, "_") {
					for k := range f.env {
						ok = ok || strings.HasPrefix(k, name) && k != name
					}
				}
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: %s: nothing reads such a variable (the consumer's are listed by consumer -h)", m.where, m.name))
				}
			}
		}
	}
	return problems, counts
}

// TestDocsNameWhatExists fails for a make target, a flag of the manager, the
// consumer or dedup-migrate, or a CONSUMER_* variable that a document
// mentions but the tree does not have. Fix the document (or the code), not
// this test.
func TestDocsNameWhatExists(t *testing.T) {
	f := gather(t)
	problems, counts := check(t, f, root, documents(t))
	for _, p := range problems {
		t.Error(p)
	}
	// The scan must see the docs' commands at all, or it checks nothing.
	if counts["target"] < 5 || counts["flag"] < 20 || counts["env"] < 20 {
		t.Errorf("the scan found only %v mentions: the parser no longer sees the docs' commands", counts)
	}
	t.Logf("checked %v", counts)

	// And it must catch what it is for: testdata/wrong.md names one wrong
	// thing per line marked WRONG, in each of the forms the docs use, and
	// right things on the other lines.
	problems, _ = check(t, f, "testdata", []string{"wrong.md"})
	wrong := wrongLines(t)
	got := map[string]bool{}
	for _, p := range problems {
		where, _, _ := strings.Cut(p, ": ")
		got[where] = true
		if !wrong[where] {
			t.Errorf("testdata/wrong.md: reported a right mention: %s", p)
		}
	}
	for w := range wrong {
		if !got[w] {
			t.Errorf("testdata/wrong.md: %s names something that does not exist, and the check missed it", w)
		}
	}
}

// wrongLines lists the lines of testdata/wrong.md marked WRONG.
func wrongLines(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "wrong.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "WRONG") {
			out[fmt.Sprintf("wrong.md:%d", i+1)] = true
		}
	}
	if len(out) < 8 {
		t.Fatalf("testdata/wrong.md marks only %d lines WRONG", len(out))
	}
	return out
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestReadmeExample decodes the README's example object strictly into the
// API type and checks the fields the CRD requires, so the first object a
// reader copies is one the API server accepts.
func TestReadmeExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, "kind: IdempotentConsumer") {
			example = block
			break
		}
	}
	if example == "" {
		t.Fatal("README.md has no IdempotentConsumer example in a yaml block")
	}
	s := runtime.NewScheme()
	if err := kafkav1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	obj, _, err := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer().Decode([]byte(example), nil, nil)
	if err != nil {
		t.Fatalf("the README's example does not decode strictly: %v", err)
	}
	ic, ok := obj.(*kafkav1alpha1.IdempotentConsumer)
	if !ok {
		t.Fatalf("the README's example decodes to %T", obj)
	}
	sp := ic.Spec
	if ic.Name == "" || len(sp.Kafka.BootstrapServers) == 0 || sp.Kafka.Topic == "" || sp.Kafka.GroupID == "" ||
		sp.Database.URLSecretRef.Name == "" || sp.Database.URLSecretRef.Key == "" || sp.Consumer.Sink.Type == "" {
		t.Errorf("the README's example lacks a required field: %+v", ic)
	}
	if sp.Consumer.Sink.Type == kafkav1alpha1.SinkSQL && (sp.Consumer.Sink.SQL == nil || sp.Consumer.Sink.SQL.Statement == "") {
		t.Error("the README's example uses the SQL sink without a statement")
	}
}
