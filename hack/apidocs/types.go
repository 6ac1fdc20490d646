package main

import (
	"fmt"
	"go/ast"
	"strconv"
	"strings"
)

// structType returns the struct of the named API type, or nil.
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
