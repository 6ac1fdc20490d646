package consumer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idempotency-dev/operator/consumer"
)

func TestParseIsolation(t *testing.T) {
	for in, want := range map[string]consumer.Isolation{
		"ReadCommitted": consumer.IsolationReadCommitted, "read_committed": consumer.IsolationReadCommitted,
		" read-committed ": consumer.IsolationReadCommitted, "READUNCOMMITTED": consumer.IsolationReadUncommitted,
		"read_uncommitted": consumer.IsolationReadUncommitted,
	} {
		if got, err := consumer.ParseIsolation(in); err != nil || got != want {
			t.Errorf("ParseIsolation(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "committed", "serializable"} {
		if _, err := consumer.ParseIsolation(in); err == nil {
			t.Errorf("ParseIsolation(%q) accepted", in)
		}
	}
}

func TestConfigIsolation(t *testing.T) {
	c := validConfig()
	c.Isolation = "read_committed" // Config takes the constants; the spellings are for ParseIsolation
	var ce *consumer.ConfigError
	if err := c.Validate(); !errors.As(err, &ce) || ce.Field != "Isolation" || !strings.Contains(ce.Problem, "read_committed") {
		t.Errorf("Validate: %v; want a ConfigError for Isolation quoting the value", err)
	}
	for _, iso := range []consumer.Isolation{"", consumer.IsolationReadCommitted, consumer.IsolationReadUncommitted} {
		c.Isolation = iso
		if err := c.Validate(); err != nil {
			t.Errorf("Isolation %q rejected: %v", iso, err)
		}
	}
	// The zero value means ReadCommitted.
	c.Isolation = ""
	if s := c.LogValue().String(); !strings.Contains(s, "isolation=ReadCommitted") {
		t.Errorf("default isolation not ReadCommitted: %s", s)
	}
}
