package outbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/outbox"
)

// TestTable_RefusesANameItsChannelCannotCarry: schema and name valid on
// their own (each a PostgreSQL identifier) whose NOTIFY channel,
// <schema>.<name>, is 64 bytes or more are refused by Validate. Accepted,
// every emit failed with "channel name too long (SQLSTATE 22023)".
func TestTable_RefusesANameItsChannelCannotCarry(t *testing.T) {
	long := outbox.Table{Schema: strings.Repeat("s", 40), Name: strings.Repeat("o", 30)}
	err := long.Validate()
	if err == nil || !strings.Contains(err.Error(), "NOTIFY channel") {
		t.Errorf("a %d-byte channel: %v, want an error naming the NOTIFY channel", len(long.Channel()), err)
	}
	ok := outbox.Table{Schema: strings.Repeat("s", 32), Name: strings.Repeat("o", 30)} // 63 bytes with the dot
	if err := ok.Validate(); err != nil {
		t.Errorf("a %d-byte channel: %v", len(ok.Channel()), err)
	}
}

// TestConfig_TakeoverDelayCoversTwoPublishes: the design needs a new owner
// to wait twice the publish timeout (a former owner's timed-out call still
// queued in the writer, then its retry); a shorter delay is refused.
func TestConfig_TakeoverDelayCoversTwoPublishes(t *testing.T) {
	cfg := outbox.Config{Table: outbox.Table{}, Brokers: []string{"127.0.0.1:9"}, PublishTimeout: time.Second, TakeoverDelay: 1500 * time.Millisecond}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "twice the publish timeout") {
		t.Errorf("takeover delay 1.5s with a 1s publish timeout: %v, want refused", err)
	}
	cfg.TakeoverDelay = 2 * time.Second
	if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "takeover") {
		t.Errorf("takeover delay 2s with a 1s publish timeout: %v", err)
	}
}
