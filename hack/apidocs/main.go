// Command apidocs generates docs/api-reference.md from the Go types of the
// API (api/v1alpha1): every type reachable from IdempotentConsumer, each
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

// Root is the kind the reference starts from.
const Root = "IdempotentConsumer"

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
	if g.types[Root] == nil {
		return nil, fmt.Errorf("no type %s in %s", Root, dir)
	}
	if g.group == "" {
		return nil, fmt.Errorf("no +groupName marker in %s", dir)
	}
	g.write()
	return g.out.Bytes(), nil
}

// split separates a doc comment's text from its markers (lines starting
// with "+").
func split(text string) (string, []string) {
	var lines, markers []string
	for l := range strings.SplitSeq(text, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "+"); ok {
			markers = append(markers, m)
			continue
		}
		lines = append(lines, l)
	}
	return strings.TrimSpace(strings.Join(lines, "\n")), markers
}

// precedingMarkers returns the markers of a comment group of markers only
// that ends one blank line above decl's doc comment (where kubebuilder
// puts the markers of root types).
func (g *generator) precedingMarkers(decl *ast.GenDecl) []string {
	start := decl.Pos()
	if decl.Doc != nil {
		start = decl.Doc.Pos()
	}
	line := g.fset.Position(start).Line
	for _, f := range g.files {
		if g.fset.File(f.Pos()) != g.fset.File(start) {
			continue
		}
		for _, cg := range f.Comments {
			if g.fset.Position(cg.End()).Line != line-2 {
				continue
			}
			text, markers := split(cg.Text())
			if text == "" {
				return markers
			}
		}
	}
	return nil
}

// marker returns the value of the first marker with the given name
// ("kubebuilder:default"), and whether there is one.
func marker(markers []string, name string) (string, bool) {
	for _, m := range markers {
		if m == name {
			return "", true
		}
		if v, ok := strings.CutPrefix(m, name+"="); ok {
			return unquoteMarker(v), true
		}
	}
	return "", false
}

func unquoteMarker(v string) string {
	if len(v) >= 2 && (v[0] == '`' && v[len(v)-1] == '`' || v[0] == '"' && v[len(v)-1] == '"') {
		if s, err := strconv.Unquote(v); err == nil {
			return s
		}
	}
	return v
}

// validationMessages returns the messages of the XValidation (CEL) markers.
func validationMessages(markers []string) []string {
	var out []string
	for _, m := range markers {
		rest, ok := strings.CutPrefix(m, "kubebuilder:validation:XValidation:")
		if !ok {
			continue
		}
		i := strings.Index(rest, `message="`)
		if i < 0 {
			out = append(out, "CEL rule")
			continue
		}
		s := rest[i+len("message="):]
		end := 1
		for end < len(s) && (s[end] != '"' || s[end-1] == '\\') {
			end++
		}
		msg, err := strconv.Unquote(s[:min(end+1, len(s))])
		if err != nil {
			msg = s
		}
		out = append(out, msg)
	}
	return out
}

func (g *generator) printf(format string, args ...any) { fmt.Fprintf(&g.out, format, args...) }

// cell makes text fit one Markdown table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// paragraphs renders a doc comment as Markdown paragraphs.
func paragraphs(s string) string {
	var out []string
	for p := range strings.SplitSeq(s, "\n\n") {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "\n\n")
}

func anchor(name string) string { return "#" + strings.ToLower(name) }

func (g *generator) structType(name string) *ast.StructType {
	if t := g.types[name]; t != nil && t.spec != nil {
		st, _ := t.spec.Type.(*ast.StructType)
		return st
	}
	return nil
}

func (g *generator) isEnum(name string) bool {
	t := g.types[name]
	if t == nil {
		return false
	}
	_, ok := marker(t.markers, "kubebuilder:validation:Enum")
	return ok
}

// typeString renders a field's type, linking the API's own types and the
// Kubernetes types to their documentation.
func (g *generator) typeString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		switch {
		case g.structType(e.Name) != nil, g.isEnum(e.Name):
			return fmt.Sprintf("[%s](%s)", e.Name, anchor(e.Name))
		case g.types[e.Name] != nil:
			if id, ok := g.types[e.Name].spec.Type.(*ast.Ident); ok {
				return id.Name
			}
		}
		return e.Name
	case *ast.StarExpr:
		return g.typeString(e.X)
	case *ast.ArrayType:
		return "[]" + g.typeString(e.Elt)
	case *ast.MapType:
		return "map[" + g.typeString(e.Key) + "]" + g.typeString(e.Value)
	case *ast.SelectorExpr:
		pkg := e.X.(*ast.Ident).Name
		switch pkg + "." + e.Sel.Name {
		case "metav1.Duration":
			return "string (duration)"
		case "metav1.Time":
			return "string (date-time)"
		}
		return fmt.Sprintf("[%s.%s](https://pkg.go.dev/%s#%s)", pkg, e.Sel.Name, g.imports[pkg], e.Sel.Name)
	}
	return fmt.Sprintf("%T", e)
}

// localTypes lists the API types a field's type refers to.
func localTypes(e ast.Expr) []string {
	switch e := e.(type) {
	case *ast.Ident:
		return []string{e.Name}
	case *ast.StarExpr:
		return localTypes(e.X)
	case *ast.ArrayType:
		return localTypes(e.Elt)
	case *ast.MapType:
		return append(localTypes(e.Key), localTypes(e.Value)...)
	}
	return nil
}

// field is one documented field of a struct.
type field struct {
	json     string
	typ      string
	required bool
	dflt     string
	valid    []string
	doc      string
}

func jsonName(f *ast.Field) (name string, inline, omitempty bool) {
	if f.Tag == nil {
		return "", false, false
	}
	tag, _ := strconv.Unquote(f.Tag.Value)
	v := reflectTag(tag, "json")
	parts := strings.Split(v, ",")
	for _, p := range parts[1:] {
		inline = inline || p == "inline"
		omitempty = omitempty || p == "omitempty" || p == "omitzero"
	}
	return parts[0], inline, omitempty
}

// reflectTag is reflect.StructTag.Get without reflect.
func reflectTag(tag, key string) string {
	for tag != "" {
		i := strings.IndexByte(tag, ':')
		if i < 0 {
			return ""
		}
		name := strings.TrimSpace(tag[:i])
		rest := tag[i+1:]
		val, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return ""
		}
		if name == key {
			v, _ := strconv.Unquote(val)
			return v
		}
		tag = rest[len(val):]
	}
	return ""
}

func (g *generator) fields(st *ast.StructType) []field {
	var out []field
	for _, f := range st.Fields.List {
		name, inline, omitempty := jsonName(f)
		if inline || name == "-" {
			continue // TypeMeta: apiVersion and kind are listed by the caller
		}
		text, markers := split(f.Doc.Text())
		fd := field{json: name, typ: g.typeString(f.Type), doc: text}
		_, optional := marker(markers, "optional")
		_, required := marker(markers, "required")
		fd.required = required || !optional && !omitempty
		fd.dflt, _ = marker(markers, "kubebuilder:default")
		fd.valid = g.validation(markers, f.Type)
		out = append(out, fd)
	}
	return out
}

// validation summarises a field's validation markers (and its type's).
func (g *generator) validation(markers []string, typ ast.Expr) []string {
	var out []string
	rng := func(minName, maxName, what string) {
		lo, hasLo := marker(markers, minName)
		hi, hasHi := marker(markers, maxName)
		switch {
		case hasLo && hasHi:
			out = append(out, fmt.Sprintf("%s %s to %s", what, lo, hi))
		case hasLo:
			out = append(out, fmt.Sprintf("%s at least %s", what, lo))
		case hasHi:
			out = append(out, fmt.Sprintf("%s at most %s", what, hi))
		}
	}
	enum := func(ms []string) {
		if v, ok := marker(ms, "kubebuilder:validation:Enum"); ok {
			out = append(out, "one of "+"`"+strings.Join(strings.Split(v, ";"), "`, `")+"`")
		}
	}
	enum(markers)
	for _, t := range localTypes(typ) {
		if g.isEnum(t) {
			enum(g.types[t].markers)
		}
	}
	rng("kubebuilder:validation:Minimum", "kubebuilder:validation:Maximum", "value")
	rng("kubebuilder:validation:MinLength", "kubebuilder:validation:MaxLength", "length")
	rng("kubebuilder:validation:MinItems", "kubebuilder:validation:MaxItems", "items")
	if v, ok := marker(markers, "kubebuilder:validation:Pattern"); ok {
		out = append(out, "pattern `"+v+"`")
	}
	if v, ok := marker(markers, "kubebuilder:validation:items:MaxLength"); ok {
		out = append(out, "each at most "+v+" long")
	}
	if v, ok := marker(markers, "kubebuilder:validation:items:Pattern"); ok {
		out = append(out, "each matches `"+v+"`")
	}
	if v, ok := marker(markers, "listType"); ok {
		s := "list type " + v
		if k, ok := marker(markers, "listMapKey"); ok {
			s += " (key `" + k + "`)"
		}
		out = append(out, s)
	}
	out = append(out, validationMessages(markers)...)
	return out
}

func (g *generator) write() {
	root := g.types[Root]
	g.printf("# API reference\n\n")
	g.printf("<!-- Generated by `go run ./hack/apidocs > docs/api-reference.md` from the Go types in api/%s. Do not edit; hack/apidocs/main_test.go fails when this file is stale. -->\n\n", g.version)
	g.printf("Group `%s`, version `%s`. %s\n\n", g.group, g.version, paragraphs(g.pkg.Doc))
	g.printf("[operator.md](operator.md) explains how the operator acts on these fields; `kubectl explain idempotentconsumer.spec` shows the same descriptions.\n\n")

	// The types, depth-first from the root in field order (the spec's tree,
	// then the status's), and the enums in order of first use.
	var order, enums []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(name string) {
		seen[name] = true
		order = append(order, name)
		for _, f := range g.structType(name).Fields.List {
			for _, t := range localTypes(f.Type) {
				switch {
				case seen[t]:
				case g.structType(t) != nil:
					visit(t)
				case g.isEnum(t):
					seen[t] = true
					enums = append(enums, t)
				}
			}
		}
	}
	visit(Root)
	if g.types[Root+"List"] != nil {
		order = append(order, Root+"List")
	}
	g.printf("Types: %s.\n\n", linkList(order))
	g.printf("Enums: %s.\n\n", linkList(enums))

	for _, name := range order {
		t := g.types[name]
		g.printf("## %s\n\n", name)
		if t.doc != "" {
			g.printf("%s\n\n", paragraphs(t.doc))
		}
		if name == Root {
			g.resource(root)
		}
		if msgs := validationMessages(t.markers); len(msgs) > 0 {
			g.printf("Rules:\n\n")
			for _, m := range msgs {
				g.printf("- %s\n", m)
			}
			g.printf("\n")
		}
		g.printf("| field | type | required | default | validation | description |\n| --- | --- | --- | --- | --- | --- |\n")
		if slices.Contains(t.markers, "kubebuilder:object:root=true") {
			g.printf("| `apiVersion` | string | yes | | `%s/%s` | |\n", g.group, g.version)
			g.printf("| `kind` | string | yes | | `%s` | |\n", name)
		}
		for _, f := range g.fields(g.structType(name)) {
			req := "no"
			if f.required {
				req = "yes"
			}
			dflt := ""
			if f.dflt != "" {
				dflt = "`" + f.dflt + "`"
			}
			g.printf("| `%s` | %s | %s | %s | %s | %s |\n", f.json, cell(f.typ), req, cell(dflt), cell(strings.Join(f.valid, "; ")), cell(f.doc))
		}
		g.printf("\n")
	}

	g.printf("## Enums\n\n")
	for _, name := range enums {
		t := g.types[name]
		g.printf("### %s\n\n", name)
		if t.doc != "" {
			g.printf("%s\n\n", paragraphs(t.doc))
		}
		g.printf("| value | description |\n| --- | --- |\n")
		v, _ := marker(t.markers, "kubebuilder:validation:Enum")
		docs := map[string]string{}
		for _, c := range t.consts {
			for _, s := range c.Decl.Specs {
				vs := s.(*ast.ValueSpec)
				if len(vs.Values) == 1 {
					if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
						val, _ := strconv.Unquote(lit.Value)
						text, _ := split(vs.Doc.Text())
						docs[val] = text
					}
				}
			}
		}
		for _, val := range strings.Split(v, ";") {
			g.printf("| `%s` | %s |\n", val, cell(docs[val]))
		}
		g.printf("\n")
	}
	g.conditions()
}

func linkList(names []string) string {
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("[%s](%s)", n, anchor(n)))
	}
	return strings.Join(out, ", ")
}

// resource describes the root kind: names, subresources, printer columns.
func (g *generator) resource(t *typeInfo) {
	g.printf("| | |\n| --- | --- |\n")
	g.printf("| API version | `%s/%s` |\n", g.group, g.version)
	scope := "Namespaced"
	for _, m := range t.markers {
		if strings.HasPrefix(m, "kubebuilder:resource:") && strings.Contains(m, "scope=Cluster") {
			scope = "Cluster"
		}
	}
	g.printf("| scope | %s |\n", scope)
	for _, m := range t.markers {
		rest, ok := strings.CutPrefix(m, "kubebuilder:resource:")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "shortName":
				g.printf("| short names | `%s` |\n", strings.Join(strings.Split(v, ";"), "`, `"))
			case "categories":
				g.printf("| categories | `%s` |\n", strings.Join(strings.Split(v, ";"), "`, `"))
			}
		}
	}
	var subs []string
	for _, m := range t.markers {
		if m == "kubebuilder:subresource:status" {
			subs = append(subs, "`status`")
		}
		if rest, ok := strings.CutPrefix(m, "kubebuilder:subresource:scale:"); ok {
			subs = append(subs, "`scale` ("+strings.ReplaceAll(rest, ",", ", ")+")")
		}
	}
	if len(subs) > 0 {
		g.printf("| subresources | %s |\n", cell(strings.Join(subs, ", ")))
	}
	var cols []string
	for _, m := range t.markers {
		rest, ok := strings.CutPrefix(m, "kubebuilder:printcolumn:")
		if !ok {
			continue
		}
		var name, path string
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "name":
				name = unquoteMarker(v)
			case "JSONPath":
				path = unquoteMarker(v)
			}
		}
		cols = append(cols, fmt.Sprintf("%s (`%s`)", name, path))
	}
	if len(cols) > 0 {
		g.printf("| `kubectl get` columns | %s |\n", cell(strings.Join(cols, ", ")))
	}
	g.printf("\n")
}

// conditions lists the condition types and reasons (the Condition* and
// Reason* constants), in source order, under the comments that group them.
func (g *generator) conditions() {
	var types, reasons []*ast.ValueSpec
	for _, f := range g.files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				if len(vs.Names) != 1 || len(vs.Values) != 1 {
					continue
				}
				switch n := vs.Names[0].Name; {
				case strings.HasPrefix(n, "Condition"):
					types = append(types, vs)
				case strings.HasPrefix(n, "Reason"):
					reasons = append(reasons, vs)
				}
			}
		}
	}
	if len(types) == 0 {
		return
	}
	value := func(vs *ast.ValueSpec) string {
		lit, ok := vs.Values[0].(*ast.BasicLit)
		if !ok {
			return ""
		}
		v, _ := strconv.Unquote(lit.Value)
		return v
	}
	g.printf("## Conditions\n\n")
	g.printf("`status.conditions` holds these types; each condition's `observedGeneration` is the object's generation when it was set. [operator.md](operator.md#status) explains how they combine.\n\n")
	g.printf("| type | meaning |\n| --- | --- |\n")
	for _, vs := range types {
		text, _ := split(vs.Doc.Text())
		// The comments start with the constant's name: drop it.
		text = strings.TrimLeft(strings.TrimPrefix(text, vs.Names[0].Name), " :")
		g.printf("| `%s` | %s |\n", value(vs), cell(text))
	}
	g.printf("\nReasons, grouped as in the source:\n\n")
	group, line := "", []string{}
	flush := func() {
		if len(line) > 0 {
			label := group
			if label == "" {
				label = "Ready"
			}
			g.printf("- %s: %s\n", label, strings.Join(line, ", "))
		}
		line = nil
	}
	for _, vs := range reasons {
		if vs.Doc != nil {
			flush()
			group = strings.TrimSuffix(strings.TrimSpace(vs.Doc.Text()), ".")
		}
		line = append(line, "`"+value(vs)+"`")
	}
	flush()
}
