package docscheck_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	headingRE  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkInText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// slug is GitHub's anchor for a heading: lower case, everything but
// letters, digits, spaces, hyphens and underscores dropped, spaces to hyphens.
func slug(heading string) string {
	heading = linkInText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// markdown reads a file's anchors and its links (outside code blocks and
// code spans), each link with its line number.
func markdown(t *testing.T, path string) (anchors map[string]bool, links map[int][]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors, links = map[string]bool{}, map[int][]string{}
	seen := map[string]int{}
	inCode := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			s := slug(m[2])
			if k := seen[s]; k > 0 {
				anchors[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			links[n] = append(links[n], m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors, links
}

// TestDocsLinksResolve fails for a relative link to a file that does not
// exist or to an anchor (#section) that no heading of the target makes: a
// renamed section must not leave dead links behind in the other documents.
func TestDocsLinksResolve(t *testing.T) {
	files := documents(t)
	more, err := filepath.Glob(filepath.Join(root, "config", "*", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	anchorsOf := map[string]map[string]bool{}
	anchors := func(file string) map[string]bool {
		if a, ok := anchorsOf[file]; ok {
			return a
		}
		a, _ := markdown(t, filepath.Join(root, file))
		anchorsOf[file] = a
		return a
	}
	checked := 0
	done := map[string]bool{}
	for _, file := range files {
		if done[file] {
			continue
		}
		done[file] = true
		_, links := markdown(t, filepath.Join(root, file))
		for n, ls := range links {
			for _, l := range ls {
				if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
					continue
				}
				checked++
				target, anchor, _ := strings.Cut(l, "#")
				tf := file
				if target != "" {
					tf = filepath.Clean(filepath.Join(filepath.Dir(file), target))
					if _, err := os.Stat(filepath.Join(root, tf)); err != nil {
						t.Errorf("%s:%d: link %q: no file %s", file, n, l, tf)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(tf, ".md") && !anchors(tf)[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", file, n, l, tf, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d links: is the scan broken?", checked)
	}
	t.Logf("%d relative links checked in %d files", checked, len(done))
}
