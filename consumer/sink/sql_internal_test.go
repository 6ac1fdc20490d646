package sink

import (
	"fmt"
	"testing"
)

func TestParseStatementRenumbers(t *testing.T) {
	got, used, err := parseStatement(`INSERT INTO t VALUES ($5, '$1', $2, $5) -- $3`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `INSERT INTO t VALUES ($2, '$1', $1, $2) -- $3`; got != want || fmt.Sprint(used) != "[2 5]" {
		t.Fatalf("got %q %v", got, used)
	}
}

func FuzzParseStatement(f *testing.F) {
	f.Add(`INSERT INTO ledger(event_id, amount) VALUES ($1, ($2::jsonb->>'amount')::numeric)`)
	f.Add(`SELECT '$5', "$6", $$ $7 $$, $tag$ $8 $tag$ -- $4` + "\n" + `, /* $3 */ $2`)
	f.Add(`SELECT $9`)
	f.Fuzz(func(t *testing.T, stmt string) {
		got, used, err := parseStatement(stmt)
		if err != nil {
			return
		}
		// The rewritten statement uses exactly $1..$len(used), and parsing
		// it again is stable.
		again, used2, err := parseStatement(got)
		if err != nil {
			t.Fatalf("rewritten %q does not parse: %v", got, err)
		}
		if again != got || len(used2) != len(used) {
			t.Fatalf("not stable: %q -> %q (%v, %v)", got, again, used, used2)
		}
		for i, n := range used2 {
			if n != i+1 {
				t.Fatalf("rewritten %q uses %v, want 1..%d", got, used2, len(used))
			}
		}
	})
}
