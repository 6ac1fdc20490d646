package app

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func base() map[string]string {
	return map[string]string{
		envvars.Brokers:     "b1:9092, b2:9092",
		envvars.Topic:       "payments",
		envvars.Group:       "ledger",
		envvars.DatabaseURL: "postgres://app:pw-s3cret@db/app",
		envvars.Sink:        "log",
	}
}

func TestParseDefaultsAndPrecedence(t *testing.T) {
	m := base()
	m[envvars.BatchMaxMessages] = "50"
	m[envvars.PolicyOutsideWindow] = "process"
	m[envvars.DedupScope] = "global"
	o, err := Parse([]string{"--batch-max-messages=70", "--batch-max-wait=1s"}, env(m), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.Consumer
	if !slices.Equal(c.Brokers, []string{"b1:9092", "b2:9092"}) || c.Topic != "payments" || c.Group != "ledger" {
		t.Errorf("kafka settings %v %q %q", c.Brokers, c.Topic, c.Group)
	}
	if c.BatchSize != 70 || c.BatchWait != time.Second {
		t.Errorf("flag did not win: batch %d wait %v", c.BatchSize, c.BatchWait)
	}
	if c.Policies[consumer.ReasonOutsideWindow] != consumer.PolicyProcess || c.Policies[consumer.ReasonNotJSON] != consumer.PolicyDeadLetter {
		t.Errorf("policies %v", c.Policies)
	}
	if c.Table.Scope != "Global" || c.Table.Name != "processed_event" || c.Table.Schema != "public" {
		t.Errorf("table %+v", c.Table)
	}
	if o.ListenAddr != ":8080" || o.Sink != "log" {
		t.Errorf("listen %q sink %q", o.ListenAddr, o.Sink)
	}
	if !slices.Contains(o.Secrets, "pw-s3cret") {
		t.Errorf("database password not among the secrets to redact")
	}
}

func TestParseDatabaseURLFallback(t *testing.T) {
	m := base()
	delete(m, envvars.DatabaseURL)
	m["DATABASE_URL"] = "postgres://x@db/app"
	o, err := Parse(nil, env(m), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Consumer.DatabaseURL != "postgres://x@db/app" {
		t.Errorf("DATABASE_URL fallback not used: %q", o.Consumer.DatabaseURL)
	}
}

func TestParseErrorsNameTheSetting(t *testing.T) {
	tests := []struct {
		mod  func(map[string]string)
		want string
	}{
		{func(m map[string]string) { delete(m, envvars.Brokers) }, "CONSUMER_BROKERS (--brokers)"},
		{func(m map[string]string) { m[envvars.Topic] = "a b" }, "CONSUMER_TOPIC (--topic)"},
		{func(m map[string]string) { delete(m, envvars.Group) }, "CONSUMER_GROUP (--group)"},
		{func(m map[string]string) { delete(m, envvars.DatabaseURL) }, "CONSUMER_DATABASE_URL (--database-url)"},
		{func(m map[string]string) { m[envvars.BatchMaxWait] = "soon" }, "CONSUMER_BATCH_MAX_WAIT"},
		{func(m map[string]string) { m[envvars.BatchMaxMessages] = "0" }, "CONSUMER_BATCH_MAX_MESSAGES"},
		{func(m map[string]string) { m[envvars.PolicyNotJSON] = "process" }, "CONSUMER_POLICY_NOT_JSON"},
		{func(m map[string]string) { m[envvars.PolicyHandlerFailed] = "ignore" }, "CONSUMER_POLICY_HANDLER_FAILED"},
		{func(m map[string]string) { m[envvars.TableName] = "Bad-Name" }, "CONSUMER_TABLE_NAME"},
		{func(m map[string]string) { m[envvars.Sink] = "kafka" }, "CONSUMER_SINK (--sink)"},
		{func(m map[string]string) { delete(m, envvars.Sink) }, "CONSUMER_SINK (--sink)"},
		{func(m map[string]string) { m[envvars.Sink] = "http" }, "CONSUMER_SINK_HTTP_URL"},
		{func(m map[string]string) { m[envvars.Sink] = "http"; m[envvars.SinkHTTPURL] = "localhost:80" }, "CONSUMER_SINK_HTTP_URL"},
		{func(m map[string]string) { m[envvars.Sink] = "sql"; m[envvars.SinkSQLStatement] = "SELECT $9" }, "CONSUMER_SINK_SQL_STATEMENT"},
		{func(m map[string]string) { m[envvars.SASLMechanism] = "plain" }, "CONSUMER_SASL_USERNAME"},
		{func(m map[string]string) { m[envvars.TLSCAFile] = "/nonexistent/ca.pem" }, "CONSUMER_TLS_CA_FILE"},
		{func(m map[string]string) { m[envvars.LogLevel] = "loud" }, "CONSUMER_LOG_LEVEL"},
		{func(m map[string]string) { m[envvars.Envelope] = "xml" }, "CONSUMER_ENVELOPE"},
		{func(m map[string]string) { m[envvars.Ordering] = "random" }, "CONSUMER_ORDERING"},
		{func(m map[string]string) {
			m[envvars.Sink] = "sql"
			m[envvars.SinkSQLStatement] = "SELECT 1"
			m[envvars.Ordering] = "key"
		}, "CONSUMER_ORDERING"},
		{func(m map[string]string) { m[envvars.MaxInFlight] = "0" }, "CONSUMER_MAX_IN_FLIGHT"},
		{func(m map[string]string) { m[envvars.MaxInFlight] = "many" }, "CONSUMER_MAX_IN_FLIGHT"},
		// 2^32+1 wrapped to 1 connection when it was converted to int32.
		{func(m map[string]string) { m[envvars.DatabaseMaxConns] = "4294967297" }, "CONSUMER_DATABASE_MAX_CONNS"},
		{func(m map[string]string) { m[envvars.DatabaseMaxConns] = "2147483648" }, "CONSUMER_DATABASE_MAX_CONNS"},
	}
	for _, tt := range tests {
		m := base()
		tt.mod(m)
		_, err := Parse(nil, env(m), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("want an error naming %s, got %v", tt.want, err)
			continue
		}
		if strings.Contains(err.Error(), "pw-s3cret") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

func TestEverySettingHasAVariable(t *testing.T) {
	have := map[string]bool{}
	for _, s := range settings {
		have[s.env] = true
	}
	for _, name := range envvars.All {
		if name != envvars.DatabaseURLFallback && !have[name] {
			t.Errorf("%s is in envvars.All but not read by the binary", name)
		}
	}
	if len(settings) != len(envvars.All)-1 {
		t.Errorf("%d settings, %d variables", len(settings), len(envvars.All))
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	_, err := Parse([]string{"-h"}, env(nil), &out)
	if !errors.Is(err, errHelp()) || !strings.Contains(out.String(), "$CONSUMER_BROKERS") {
		t.Fatalf("help: %v\n%s", err, out.String())
	}
}

func errHelp() error { return flag.ErrHelp }
