package docscheck_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/idempotency-dev/operator/controllers"
)

// TestOperatorDocPoolSize: docs/operator.md's pool size per database URL is
// the manager's default (--database-max-conns).
func TestOperatorDocPoolSize(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "operator.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("\\(`PoolCache`, (\\d+)\\s").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/operator.md no longer says how many connections a pool has (\"(`PoolCache`, N\"): update this test with it")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != controllers.DefaultDatabaseMaxConns {
		t.Errorf("docs/operator.md says %d connections per pool, the manager's default is %d", n, controllers.DefaultDatabaseMaxConns)
	}
}

// TestSamplesReadmeListsEverySample: every object in config/samples has a
// section ("## NAME: ..." or "## NAME and NAME: ...") in
// config/samples/README.md, and every section names an object there.
func TestSamplesReadmeListsEverySample(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			var obj struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if obj.Kind != "" && obj.Kind != "Secret" {
				names[obj.Metadata.Name] = filepath.Base(f)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "config", "samples", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## ([a-z0-9-]+(?: and [a-z0-9-]+)*):`).FindAllStringSubmatch(string(readme), -1) {
		for _, n := range strings.Split(m[1], " and ") {
			sections[n] = true
		}
	}
	if len(names) < 5 {
		t.Fatalf("found %d sample objects: the test reads config/samples wrong", len(names))
	}
	for name, file := range names {
		if !sections[name] {
			t.Errorf("config/samples/%s (%s) has no section \"## %s: ...\" in config/samples/README.md", file, name, name)
		}
	}
	for s := range sections {
		if _, ok := names[s]; !ok {
			t.Errorf("config/samples/README.md has a section for %s, which no sample defines", s)
		}
	}
}

// TestOperatorDocNamesEveryReason: every condition type and reason the API
// declares (the Condition* and Reason* constants of api/v1alpha1) appears,
// in backquotes, in docs/operator.md, whose status tables are what a user
// reads when kubectl shows one.
func TestOperatorDocNamesEveryReason(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operator.md"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(root, "api", "v1alpha1", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		{
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if !strings.HasPrefix(name.Name, "Reason") && !strings.HasPrefix(name.Name, "Condition") || i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, _ := strconv.Unquote(lit.Value)
						n++
						if !strings.Contains(string(doc), "`"+v+"`") {
							t.Errorf("%s = %q is not in docs/operator.md", name.Name, v)
						}
					}
				}
			}
		}
	}
	if n < 30 {
		t.Fatalf("found %d condition types and reasons: the test reads api/v1alpha1 wrong", n)
	}
}
