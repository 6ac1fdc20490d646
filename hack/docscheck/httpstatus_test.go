package docscheck_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// The outcomes of an HTTP answer, as the status table of docs/consumer.md
// words them and as the runtime's errors say.
const (
	outSuccess   = "success"
	outLater     = "retried, no attempt used"
	outAttempt   = "retried, using attempts"
	outPermanent = "dead-lettered at once"
)

// statusRule is one cell of the table's first column: what it covers and
// how specific it is (a status with a Retry-After qualifier beats a bare
// status, which beats a class such as 5xx, which beats "other").
type statusRule struct {
	lo, hi   int
	ra       int // -1 without Retry-After, 1 with, 0 either
	priority int
	outcome  string
	row      string
}

var (
	qualifiedStatus = regexp.MustCompile("\\b([1-5]\\d\\d) (with|without) `Retry-After`")
	bareStatus      = regexp.MustCompile(`\b([1-5]\d\d)\b`)
	statusClass     = regexp.MustCompile(`\b(other )?([1-5])xx\b`)
	statusList      = regexp.MustCompile(`\b4\d\d(?:\s*(?:,|/|,?\s*and)\s*4\d\d\b)+`)
)

// statusTable reads the answer/outcome table of docs/consumer.md's Sinks
// section.
func statusTable(t *testing.T) []statusRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "consumer.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sinks, ok := strings.Cut(string(b), "\n### Sinks\n")
	if !ok {
		t.Fatal("docs/consumer.md has no Sinks section")
	}
	_, table, ok := strings.Cut(sinks, "| answer | outcome |\n| --- | --- |\n")
	if !ok {
		t.Fatal("docs/consumer.md's Sinks section has no answer/outcome table")
	}
	var rules []statusRule
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 2 {
			t.Fatalf("status table row %q: want 2 cells", line)
		}
		answer, outcome := cells[0], cells[1]
		var out string
		switch {
		case strings.HasPrefix(outcome, "success"):
			out = outSuccess
		case strings.Contains(outcome, "uses no attempt"):
			out = outLater
		case strings.Contains(outcome, "at once"):
			out = outPermanent
		case strings.Contains(outcome, "Unavailable"):
			continue // connection failures: no status
		case strings.HasPrefix(outcome, "retried"):
			out = outAttempt
		default:
			t.Fatalf("status table row %q: outcome not recognised", line)
		}
		add := func(lo, hi, ra, prio int) {
			rules = append(rules, statusRule{lo: lo, hi: hi, ra: ra, priority: prio, outcome: out, row: answer})
		}
		rest := answer
		// A qualifier inside parentheses ("5xx (503 without Retry-After)")
		// explains the class; one outside names the row's own answers.
		if i := strings.IndexByte(rest, '('); i >= 0 {
			if qualifiedStatus.MatchString(rest[i:]) {
				rest = rest[:i] + rest[strings.IndexByte(rest, ')')+1:]
			}
		}
		for _, m := range qualifiedStatus.FindAllStringSubmatch(rest, -1) {
			st, _ := strconv.Atoi(m[1])
			ra := 1
			if m[2] == "without" {
				ra = -1
			}
			add(st, st, ra, 3)
		}
		rest = qualifiedStatus.ReplaceAllString(rest, "")
		for _, m := range statusClass.FindAllStringSubmatch(rest, -1) {
			c, _ := strconv.Atoi(m[2])
			prio := 1
			if m[1] != "" {
				prio = 0
			}
			add(c*100, c*100+99, 0, prio)
		}
		// "(and 3xx)" after "other 4xx" is as general as it.
		if strings.Contains(rest, "other ") {
			for i := range rules {
				if rules[i].row == answer {
					rules[i].priority = 0
				}
			}
		}
		for _, m := range bareStatus.FindAllStringSubmatch(statusClass.ReplaceAllString(rest, ""), -1) {
			st, _ := strconv.Atoi(m[1])
			add(st, st, 0, 2)
		}
	}
	if len(rules) == 0 {
		t.Fatal("the status table has no rows")
	}
	return rules
}

// documented is the table's outcome of status st with or without
// Retry-After: the most specific row covering it.
func documented(t *testing.T, rules []statusRule, st int, withRA bool) string {
	t.Helper()
	best, out, rows := -1, "", []string{}
	for _, r := range rules {
		if st < r.lo || st > r.hi || (r.ra == 1 && !withRA) || (r.ra == -1 && withRA) {
			continue
		}
		switch {
		case r.priority > best:
			best, out, rows = r.priority, r.outcome, []string{r.row}
		case r.priority == best && r.outcome != out:
			rows = append(rows, r.row)
			t.Errorf("status %d (Retry-After %v): the table's rows %q disagree", st, withRA, rows)
		}
	}
	if best < 0 {
		t.Errorf("status %d (Retry-After %v): no row of the table covers it", st, withRA)
	}
	return out
}

// TestHTTPStatusTableIsTheOneSource: the answer/outcome table of
// docs/consumer.md is what the HTTP sink does, for every status from 200
// to 599 with and without Retry-After, and every list of retryable 4xx
// answers in docs/any-language.md is the table's.
func TestHTTPStatusTableIsTheOneSource(t *testing.T) {
	rules := statusTable(t)

	var status int
	var retryAfter string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	h, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ev := &consumer.Event{ID: uuid.Must(uuid.NewV7()), Payload: []byte(`{}`)}
	var retryable4xx []int
	for st := 200; st <= 599; st++ {
		for _, withRA := range []bool{false, true} {
			status, retryAfter = st, ""
			if withRA {
				retryAfter = "1"
			}
			err := h(context.Background(), ev)
			var got string
			_, later := consumer.RetryLaterAfter(err)
			switch {
			case err == nil:
				got = outSuccess
			case consumer.IsPermanent(err):
				got = outPermanent
			case later:
				got = outLater
			case consumer.IsUnavailable(err):
				got = "unavailable"
			default:
				got = outAttempt
			}
			want := documented(t, rules, st, withRA)
			if got != want {
				t.Errorf("HTTP %d (Retry-After %v): the runtime's outcome is %q, docs/consumer.md's table says %q", st, withRA, got, want)
			}
			if st/100 == 4 && !withRA && (want == outLater || want == outAttempt) {
				retryable4xx = append(retryable4xx, st)
			}
		}
	}
	if t.Failed() {
		return
	}

	b, err := os.ReadFile(filepath.Join(root, "docs", "any-language.md"))
	if err != nil {
		t.Fatal(err)
	}
	lists := statusList.FindAllString(string(b), -1)
	if len(lists) == 0 {
		t.Fatal("docs/any-language.md lists no retryable 4xx answers")
	}
	for _, l := range lists {
		var sts []int
		for _, m := range bareStatus.FindAllString(l, -1) {
			st, _ := strconv.Atoi(m)
			sts = append(sts, st)
		}
		slices.Sort(sts)
		if !slices.Equal(sts, retryable4xx) {
			t.Errorf("docs/any-language.md lists %q as the retryable 4xx answers; docs/consumer.md's table and the runtime retry %v", strings.Join(strings.Fields(l), " "), retryable4xx)
		}
	}
	t.Logf("200..599 with and without Retry-After agree with the table; retryable 4xx %v in %d lists of any-language.md", retryable4xx, len(lists))
}
