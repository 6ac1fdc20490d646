package txpipe

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestHandlerInfra: which handler errors pause and retry the batch
// (infrastructure) and which are the event's failure.
func TestHandlerInfra(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("inserting: %w", &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"})
	}
	tests := []struct {
		name  string
		err   error
		infra bool
	}{
		{"plain error", errors.New("boom"), false},
		{"Unavailable", event.Unavailable(errors.New("downstream refused")), true},
		{"Permanent", event.Permanent(errors.New("bad")), false},
		{"data exception", pg("22003"), false},
		{"data exception marked Unavailable", event.Unavailable(pg("22P02")), false},
		{"unique violation marked Unavailable", event.Unavailable(pg("23505")), false},
		{"undefined column", pg("42703"), false},
		{"undefined table marked Unavailable", event.Unavailable(pg("42P01")), true},
		{"connection exception", pg("08006"), true},
		{"disk full", pg("53100"), true},
		{"admin shutdown", pg("57P01"), true},
		{"I/O error", pg("58030"), true},
		{"serialization failure", pg("40001"), true},
		{"deadlock", pg("40P01"), true},
		{"idle in transaction timeout", pg("25P03"), true},
		{"transaction timeout", pg("25P04"), true},
		{"statement timeout", pg("57014"), false},
		{"joined with a rollback failure", errors.Join(errors.New("h"), pg("08003")), true},
	}
	for _, tt := range tests {
		if got := handlerInfra(tt.err); got != tt.infra {
			t.Errorf("%s: handlerInfra(%v) = %v, want %v", tt.name, tt.err, got, tt.infra)
		}
	}
}

func TestIsServerTimeout(t *testing.T) {
	for code, want := range map[string]bool{"25P03": true, "25P04": true, "25P02": false, "57014": false} {
		err := fmt.Errorf("committing: %w", &record.InfraError{Err: &pgconn.PgError{Severity: "FATAL", Code: code}})
		if got := isServerTimeout(err); got != want {
			t.Errorf("isServerTimeout(%s) = %v, want %v", code, got, want)
		}
	}
	if isServerTimeout(errors.New("unexpected EOF")) {
		t.Error("a plain error is not a server timeout")
	}
}

// TestTxGuard: the limit halves per timeout down to one record, refuses to
// shrink one record, and doubles back to the whole batch after growAfter
// commits in a row each.
func TestTxGuard(t *testing.T) {
	var g txGuard
	if n := g.size(100); n != 100 {
		t.Fatalf("no limit: size(100) = %d", n)
	}
	for _, want := range []int{50, 25, 12, 6, 3, 1} {
		if !g.shrink(g.size(100)) {
			t.Fatalf("shrink refused above one record (limit %d)", g.limit)
		}
		if g.limit != want {
			t.Fatalf("limit %d, want %d", g.limit, want)
		}
	}
	if g.shrink(1) {
		t.Fatal("shrink of a one-record transaction must report false")
	}
	if n := g.size(100); n != 1 {
		t.Fatalf("size(100) = %d at limit 1", n)
	}
	for _, want := range []int{2, 4, 8, 16, 32, 64, 0} {
		for range growAfter - 1 {
			g.committed(100)
		}
		before := g.limit
		g.committed(100)
		if g.limit != want {
			t.Fatalf("after %d commits at limit %d: limit %d, want %d", growAfter, before, g.limit, want)
		}
	}
	if n := g.size(7); n != 7 {
		t.Fatalf("size(7) = %d with no limit", n)
	}
}

func TestCommitRefused(t *testing.T) {
	commit := func(sev, code string) error {
		return &record.InfraError{Err: fmt.Errorf("committing: %w", &commitError{&pgconn.PgError{Severity: sev, Code: code}})}
	}
	tests := []struct {
		name    string
		err     error
		refused bool
	}{
		{"deferred foreign key", commit("ERROR", "23503"), true},
		{"deferred trigger exception", commit("ERROR", "P0001"), true},
		{"serialization failure at commit", commit("ERROR", "40001"), false},
		{"idle in transaction timeout", commit("FATAL", "25P03"), false},
		{"admin shutdown", commit("FATAL", "57P01"), false},
		{"connection lost", &record.InfraError{Err: fmt.Errorf("committing: %w", &commitError{errors.New("unexpected EOF")})}, false},
		{"not a commit", &record.InfraError{Err: fmt.Errorf("recording event ids: %w", &pgconn.PgError{Severity: "ERROR", Code: "23505"})}, false},
	}
	for _, tt := range tests {
		if got := commitRefused(tt.err) != nil; got != tt.refused {
			t.Errorf("%s: commitRefused = %v, want %v", tt.name, got, tt.refused)
		}
	}
}
