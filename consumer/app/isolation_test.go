package app

import (
	"io"
	"strings"
	"testing"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

func TestParseIsolationSetting(t *testing.T) {
	for in, want := range map[string]consumer.Isolation{
		"":                 consumer.IsolationReadCommitted, // unset: the default
		"read_uncommitted": consumer.IsolationReadUncommitted,
		"ReadCommitted":    consumer.IsolationReadCommitted,
	} {
		m := base()
		if in != "" {
			m[envvars.Isolation] = in
		}
		o, err := Parse(nil, env(m), io.Discard)
		if err != nil || o.Consumer.Isolation != want {
			t.Errorf("%s=%q: isolation %q, %v; want %q", envvars.Isolation, in, o.Consumer.Isolation, err, want)
		}
	}
	m := base()
	m[envvars.Isolation] = "dirty"
	if _, err := Parse(nil, env(m), io.Discard); err == nil || !strings.Contains(err.Error(), "CONSUMER_ISOLATION (--isolation)") {
		t.Errorf("want an error naming CONSUMER_ISOLATION (--isolation), got %v", err)
	}
}
