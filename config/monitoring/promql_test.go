/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package monitoring_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// selector is one metric reference in a PromQL expression: the metric name
// and the label names its matchers use (`name{label="..."}`).
type selector struct {
	Metric string
	Labels []string
}

// PromQL keywords and the aggregation operators, which look like identifiers
// but are not metric names. Functions are recognised by the "(" after them.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true,
}

// Aggregation operators: `sum by (x) (...)` has no "(" right after the name.
var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// Keywords followed by a parenthesised list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

type ptoken struct {
	kind string // ident, string, number, var, range, punct
	text string
}

// lexPromQL splits a PromQL expression (with Grafana's $variables) into
// tokens. It is not a parser; it knows just enough to tell metric names from
// functions, keywords, label names, strings, durations and variables.
func lexPromQL(expr string) ([]ptoken, error) {
	var toks []ptoken
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // comment to end of line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d in %q", i, expr)
			}
			toks = append(toks, ptoken{"string", expr[i+1 : j]})
			i = j + 1
		case c == '[': // a range or subquery: [5m], [1h:5m], [$__rate_interval]
			k := strings.IndexByte(expr[i:], ']')
			if k < 0 {
				return nil, fmt.Errorf("unterminated [ at %d in %q", i, expr)
			}
			toks = append(toks, ptoken{"range", expr[i : i+k+1]})
			i += k + 1
		case c == '$': // Grafana variable: $name, ${name}, ${name:fmt}, $__rate_interval
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				k := strings.IndexByte(expr[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated ${ at %d in %q", i, expr)
				}
				j += k + 1
			} else {
				for j < len(expr) && isIdent(expr[j]) {
					j++
				}
			}
			toks = append(toks, ptoken{"var", expr[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(expr) && expr[i+1] >= '0' && expr[i+1] <= '9':
			j := i
			for j < len(expr) && (isIdent(expr[j]) && expr[j] != ':' || expr[j] == '.') {
				j++
			}
			toks = append(toks, ptoken{"number", expr[i:j]})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			toks = append(toks, ptoken{"ident", expr[i:j]})
			i = j
		default:
			// Two-character operators first.
			if i+1 < len(expr) {
				switch two := expr[i : i+2]; two {
				case "!=", "=~", "!~", "==", ">=", "<=":
					toks = append(toks, ptoken{"punct", two})
					i += 2
					continue
				}
			}
			if !strings.ContainsRune("(){}],=<>+-*/%^@", rune(c)) {
				return nil, fmt.Errorf("unexpected %q at %d in %q", c, i, expr)
			}
			toks = append(toks, ptoken{"punct", string(c)})
			i++
		}
	}
	return toks, nil
}

// selectors returns the metric references of a PromQL expression.
func selectors(expr string) ([]selector, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return nil, err
	}
	var out []selector
	next := func(i int) ptoken {
		if i+1 < len(toks) {
			return toks[i+1]
		}
		return ptoken{}
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.kind == "ident" && labelListKeywords[strings.ToLower(t.text)] && next(i).text == "(":
			// by (a, b): skip the label list.
			j := i + 1
			for j < len(toks) && toks[j].text != ")" {
				j++
			}
			i = j
		case t.kind == "ident" && promqlKeywords[strings.ToLower(t.text)]:
		case t.kind == "ident" && aggregations[strings.ToLower(t.text)] && labelListKeywords[strings.ToLower(next(i).text)]:
		case t.kind == "ident" && next(i).text == "(":
			// A function or aggregation operator.
		case t.kind == "ident" || t.kind == "punct" && t.text == "{" && (i == 0 || !isMetricToken(toks, i-1)):
			sel := selector{}
			j := i
			if t.kind == "ident" {
				sel.Metric = t.text
				j = i + 1
			}
			if j < len(toks) && toks[j].text == "{" {
				k, labels, name, err := matchers(toks, j)
				if err != nil {
					return nil, fmt.Errorf("%w in %q", err, expr)
				}
				if sel.Metric == "" {
					sel.Metric = name
				}
				sel.Labels = labels
				j = k
			}
			if sel.Metric == "" {
				return nil, fmt.Errorf("selector without a metric name in %q", expr)
			}
			out = append(out, sel)
			i = j - 1
		}
	}
	return out, nil
}

func isMetricToken(toks []ptoken, i int) bool { return toks[i].kind == "ident" }

// matchers reads `{l1="v", l2=~"v"}` starting at the "{" at i. It returns the
// index after the "}", the label names, and the value of a __name__="x"
// matcher if there is one.
func matchers(toks []ptoken, i int) (end int, labels []string, name string, err error) {
	for j := i + 1; j < len(toks); j++ {
		switch toks[j].text {
		case "}":
			return j + 1, labels, name, nil
		case ",":
			continue
		}
		if toks[j].kind != "ident" || j+2 >= len(toks) || toks[j+1].kind != "punct" {
			return 0, nil, "", fmt.Errorf("malformed label matcher at token %q", toks[j].text)
		}
		switch toks[j+1].text {
		case "=", "!=", "=~", "!~":
		default:
			return 0, nil, "", fmt.Errorf("malformed label matcher at token %q", toks[j].text)
		}
		if toks[j+2].kind != "string" {
			return 0, nil, "", fmt.Errorf("label %s is not matched against a string", toks[j].text)
		}
		if toks[j].text == "__name__" {
			if toks[j+1].text != "=" {
				return 0, nil, "", fmt.Errorf("only __name__=\"...\" is supported")
			}
			name = toks[j+2].text
		} else {
			labels = append(labels, toks[j].text)
		}
		j += 2
	}
	return 0, nil, "", fmt.Errorf("unterminated label matchers")
}

// grafanaQuery returns the PromQL part of a templating query:
// label_values(expr, label) and label_values(label) are Grafana functions.
func grafanaQuery(q string) (string, error) {
	q = strings.TrimSpace(q)
	inner, ok := strings.CutPrefix(q, "label_values(")
	if !ok {
		return q, nil
	}
	inner, ok = strings.CutSuffix(inner, ")")
	if !ok {
		return "", fmt.Errorf("malformed label_values query %q", q)
	}
	comma := strings.LastIndexByte(inner, ',')
	if comma < 0 {
		return "", nil // label_values(label): no metric
	}
	return inner[:comma], nil
}

func TestSelectors(t *testing.T) {
	tests := []struct {
		expr string
		want []selector
	}{
		{`up`, []selector{{Metric: "up"}}},
		{`sum by (namespace, name) (rate(a_total{topic="x", reason=~"y|z"}[5m])) > 0.01`,
			[]selector{{Metric: "a_total", Labels: []string{"topic", "reason"}}}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_seconds_bucket{namespace=~"$namespace"}[$__rate_interval])))`,
			[]selector{{Metric: "h_seconds_bucket", Labels: []string{"namespace"}}}},
		{`a / on (x) group_left (y) b unless ignoring (z) c offset 1h30m`,
			[]selector{{Metric: "a"}, {Metric: "b"}, {Metric: "c"}}},
		{`label_replace(rate(a[10m]), "outcome", "processed", "", "") or count(b == 0) or vector(0)`,
			[]selector{{Metric: "a"}, {Metric: "b"}}},
		{`{__name__="a", job="j"} + Inf - NaN * 1e3`, []selector{{Metric: "a", Labels: []string{"job"}}}},
		{`# a comment naming not_a_metric
max_over_time(x:recorded[1h:5m]) and BOOL 1`, []selector{{Metric: "x:recorded"}}},
		{`sum(rate(m{l="a \"quoted\" value, with } and {"}[1m]))`, []selector{{Metric: "m", Labels: []string{"l"}}}},
	}
	for _, tt := range tests {
		got, err := selectors(tt.expr)
		if err != nil {
			t.Errorf("selectors(%q): %v", tt.expr, err)
			continue
		}
		if !slices.EqualFunc(got, tt.want, func(a, b selector) bool {
			return a.Metric == b.Metric && slices.Equal(a.Labels, b.Labels)
		}) {
			t.Errorf("selectors(%q) = %+v, want %+v", tt.expr, got, tt.want)
		}
	}
	for _, bad := range []string{`a{b="c"`, `rate(a[5m]` + "\x00", `a{b=c}`, `"unterminated`} {
		if _, err := selectors(bad); err == nil {
			t.Errorf("selectors(%q) accepted a malformed expression", bad)
		}
	}
}
