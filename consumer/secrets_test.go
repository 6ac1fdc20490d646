package consumer_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer"
)

// TestAddSecrets: a secret a sink registers is redacted like the database
// password, in the dlq-error header and in the log; registering after Run
// has started fails.
func TestAddSecrets(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	const token = "sk-live-7d1e0c9b8a"
	id := newID(t)
	e.failIDs.Store(id, consumer.Permanent(errors.New("provider said: token "+token+" is revoked")))
	e.kafka.Produce(t, e.topic, event(id, 0, ""))

	r := e.start(e.config(), nil, func(c *consumer.Consumer) {
		if err := c.AddSecrets(token, "x"); err != nil {
			t.Fatal(err)
		}
	})
	e.waitCaughtUp(t, 30*time.Second)
	dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 10*time.Second)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	if got := header(dl[0], consumer.HeaderDLQError); strings.Contains(got, token) || !strings.Contains(got, "is revoked") {
		t.Fatalf("dlq-error = %q, want the text with the token redacted", got)
	}
	if strings.Contains(e.logBuf.String(), token) {
		t.Fatal("the log holds the registered secret")
	}
	if err := r.c.AddSecrets("late-secret"); err == nil {
		t.Fatal("AddSecrets after Run succeeded")
	}
}
