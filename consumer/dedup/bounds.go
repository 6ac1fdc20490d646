package dedup

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// boundRE matches a range partition bound on one column as pg_get_expr
// prints it: FOR VALUES FROM (x) TO (y).
var boundRE = regexp.MustCompile(`^FOR VALUES FROM \((.+)\) TO \((.+)\)$`)

// parseBound fills p's bound fields from pg_get_expr(relpartbound) text.
func parseBound(p *ObservedPartition, expr string) error {
	p.Bound = expr
	if expr == "DEFAULT" {
		p.Default = true
		return nil
	}
	m := boundRE.FindStringSubmatch(expr)
	if m == nil {
		return fmt.Errorf("parsing bound of partition %s: unexpected %q", p.Name, expr)
	}
	var err error
	if p.From, p.FromMin, err = parseBoundValue(m[1], "MINVALUE"); err != nil {
		return fmt.Errorf("parsing lower bound of partition %s: %w", p.Name, err)
	}
	if p.To, p.ToMax, err = parseBoundValue(m[2], "MAXVALUE"); err != nil {
		return fmt.Errorf("parsing upper bound of partition %s: %w", p.Name, err)
	}
	return nil
}

func parseBoundValue(s, infinite string) (uuid.UUID, bool, error) {
	if s == infinite {
		return uuid.UUID{}, true, nil
	}
	s = strings.TrimSuffix(s, "::uuid")
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' {
		return uuid.UUID{}, false, fmt.Errorf("unexpected bound value %q", s)
	}
	u, err := uuid.Parse(s[1 : len(s)-1])
	if err != nil {
		return uuid.UUID{}, false, fmt.Errorf("bound value %q: %w", s, err)
	}
	return u, false, nil
}
