package main

import (
	"fmt"
	"go/ast"
	"strconv"
	"strings"
)

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
