// Command apidocs generates docs/api-reference.md from the Go types of the
// API (api/v1alpha1): every type reachable from its kinds (Roots), each
// field with its JSON name, type, whether it is required, its default and its
// validation (from the kubebuilder markers), and its doc comment (what
// `kubectl explain` shows); then the enums with their values and the condition
// types and reasons.
//
//	go run ./hack/apidocs > docs/api-reference.md
//
// The test in this directory fails when docs/api-reference.md is stale.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Root is the kind the reference starts from; Roots are all its kinds, in
// the order they are documented.
const Root = "IdempotentConsumer"

var Roots = []string{Root, "DeadLetterReplay"}

func main() {
	dir := flag.String("dir", "api/v1alpha1", "package directory of the API types")
	flag.Parse()
	out, err := Generate(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidocs:", err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}

// typeInfo is one named type of the API package.
type typeInfo struct {
	name    string
	spec    *ast.TypeSpec
	doc     string   // doc comment without markers
	markers []string // type-level markers, without the leading "+"
	consts  []*doc.Value
}

type generator struct {
	fset    *token.FileSet
	pkg     *doc.Package
	types   map[string]*typeInfo
	imports map[string]string // import name -> path
	group   string
	version string
	files   []*ast.File
	out     bytes.Buffer
	// link targets that exist (types documented in the output).
	documented map[string]bool
}

// Generate returns the Markdown reference for the API package in dir.
func Generate(dir string) ([]byte, error) {
	g := &generator{fset: token.NewFileSet(), types: map[string]*typeInfo{}, imports: map[string]string{}, documented: map[string]bool{}}
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	for _, p := range paths {
		base := filepath.Base(p)
		if strings.HasSuffix(base, "_test.go") || strings.HasPrefix(base, "zz_generated") {
			continue
		}
		f, err := parser.ParseFile(g.fset, p, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		g.files = append(g.files, f)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			name := filepath.Base(path)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			g.imports[name] = path
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if v, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(c.Text, "//")), "+groupName="); ok {
					g.group = v
				}
			}
		}
	}
	if len(g.files) == 0 {
		return nil, fmt.Errorf("no Go files in %s", dir)
	}
	g.version = filepath.Base(dir)
	// doc.NewFromFiles takes ownership of the files' comments for docs; the
	// AST is still used for fields and markers.
	g.pkg, err = doc.NewFromFiles(g.fset, g.files, "api", doc.PreserveAST|doc.AllDecls)
	if err != nil {
		return nil, err
	}
	for _, t := range g.pkg.Types {
		ti := &typeInfo{name: t.Name, consts: t.Consts}
		for _, s := range t.Decl.Specs {
			if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == t.Name {
				ti.spec = ts
			}
		}
		ti.doc, ti.markers = split(t.Doc)
		ti.markers = append(g.precedingMarkers(t.Decl), ti.markers...)
		g.types[t.Name] = ti
	}
	for _, root := range Roots {
		if g.types[root] == nil {
			return nil, fmt.Errorf("no type %s in %s", root, dir)
		}
	}
	if g.group == "" {
		return nil, fmt.Errorf("no +groupName marker in %s", dir)
	}
	g.write()
	return g.out.Bytes(), nil
}
