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
