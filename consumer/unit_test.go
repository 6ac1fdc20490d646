package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer"
)

func validConfig() consumer.Config {
	return consumer.Config{
		Brokers:     []string{"localhost:9092"},
		Topic:       "payments",
		Group:       "ledger",
		DatabaseURL: "postgres://app:s3cret-pw@db:5432/app",
	}
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	tests := []struct {
		field string
		mod   func(*consumer.Config)
	}{
		{"Brokers", func(c *consumer.Config) { c.Brokers = nil }},
		{"Brokers", func(c *consumer.Config) { c.Brokers = []string{"no-port"} }},
		{"Topic", func(c *consumer.Config) { c.Topic = "" }},
		{"Topic", func(c *consumer.Config) { c.Topic = "bad topic" }},
		{"Group", func(c *consumer.Config) { c.Group = "" }},
		{"DeadLetterTopic", func(c *consumer.Config) { c.DeadLetterTopic = "payments" }},
		{"DeadLetterTopic", func(c *consumer.Config) { c.DeadLetterTopic = "a/b" }},
		{"StartOffset", func(c *consumer.Config) { c.StartOffset = "middle" }},
		{"SessionTimeout", func(c *consumer.Config) { c.SessionTimeout = time.Millisecond }},
		{"HeartbeatInterval", func(c *consumer.Config) { c.SessionTimeout = time.Second; c.HeartbeatInterval = 2 * time.Second }},
		{"SASL.Mechanism", func(c *consumer.Config) { c.SASL = consumer.SASL{Mechanism: "GSSAPI", Username: "u", Password: "p"} }},
		{"SASL.Password", func(c *consumer.Config) { c.SASL = consumer.SASL{Mechanism: consumer.SASLPlain, Username: "u"} }},
		{"SASL.Mechanism", func(c *consumer.Config) { c.SASL = consumer.SASL{Username: "u"} }},
		{"DatabaseURL", func(c *consumer.Config) { c.DatabaseURL = "" }},
		{"DatabaseURL", func(c *consumer.Config) { c.DatabaseURL = "postgres://app:s3cret-pw@db:notaport/app" }},
		{"Table", func(c *consumer.Config) { c.Table.Name = "Robert'); DROP TABLE students;--" }},
		{"Table", func(c *consumer.Config) { c.Table.Scope = "Team" }},
		{"BatchSize", func(c *consumer.Config) { c.BatchSize = -1 }},
		{"BatchWait", func(c *consumer.Config) { c.BatchWait = time.Hour }},
		{"Envelope", func(c *consumer.Config) { c.Envelope.Mode = "avro" }},
		{"HandlerMaxAttempts", func(c *consumer.Config) { c.HandlerMaxAttempts = 1000 }},
		{"HandlerBackoffMax", func(c *consumer.Config) { c.HandlerBackoff = time.Second; c.HandlerBackoffMax = time.Millisecond }},
		{"HandlerBackoffMax", func(c *consumer.Config) { c.HandlerBackoffMax = time.Minute; c.ShutdownTimeout = 30 * time.Second }},
		{"Policies[not_json]", func(c *consumer.Config) {
			c.Policies = map[consumer.Reason]consumer.Policy{consumer.ReasonNotJSON: consumer.PolicyProcess}
		}},
		{"Policies[bogus]", func(c *consumer.Config) {
			c.Policies = map[consumer.Reason]consumer.Policy{"bogus": consumer.PolicySkip}
		}},
		{"Policies[oversized]", func(c *consumer.Config) {
			c.Policies = map[consumer.Reason]consumer.Policy{consumer.ReasonOversized: "Ignore"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			c := validConfig()
			tt.mod(&c)
			err := c.Validate()
			var ce *consumer.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *ConfigError", err)
			}
			if ce.Field != tt.field {
				t.Errorf("error names %q, want %q (%v)", ce.Field, tt.field, err)
			}
			if strings.Contains(err.Error(), "s3cret-pw") {
				t.Errorf("error text contains the password: %v", err)
			}
		})
	}
	c := validConfig()
	c.Policies = map[consumer.Reason]consumer.Policy{consumer.ReasonOutsideWindow: consumer.PolicyProcess}
	if err := c.Validate(); err != nil {
		t.Errorf("Process for outside_window rejected: %v", err)
	}
	if _, err := consumer.New(validConfig(), nil); err == nil {
		t.Error("nil handler accepted")
	}
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]consumer.Policy{
		"DeadLetter": consumer.PolicyDeadLetter, "dead-letter": consumer.PolicyDeadLetter, "dlq": consumer.PolicyDeadLetter,
		"SKIP": consumer.PolicySkip, "stop": consumer.PolicyStop, "Process": consumer.PolicyProcess,
	} {
		if got, err := consumer.ParsePolicy(in); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := consumer.ParsePolicy("retry"); err == nil {
		t.Error("ParsePolicy(retry) accepted")
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://app:s3cret@db:5432/app?sslmode=require": "postgres://app:xxxxx@db:5432/app?sslmode=require",
		"postgresql://app@db/app?password=s3cret":           "postgresql://app@db/app?password=xxxxx",
		"host=db user=app password=s3cret dbname=app":       "host=db user=app password=xxxxx dbname=app",
		"host=db password='s3 cret' dbname=app":             "host=db password=xxxxx dbname=app",
		"postgres://db/app":                                 "postgres://db/app",
	} {
		if got := consumer.RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRedactDSN_EverySecretParameter masks every parameter that carries a
// secret, in every form a connection string takes: the URL's userinfo, its
// query (password, sslpassword: the client key's passphrase) and key=value.
// Before, a URL's sslpassword= query value reached the consumer's start log.
func TestRedactDSN_EverySecretParameter(t *testing.T) {
	const pw, keyPass = "s3cretPW", "k3yPASS"
	for _, dsn := range []string{
		"postgres://app@db/app?sslmode=verify-full&sslcert=/c.pem&sslkey=/k.pem&sslpassword=" + keyPass,
		"postgres://app:" + pw + "@db/app?sslpassword=" + keyPass,
		"postgresql://app@db/app?password=" + pw + "&sslpassword=" + keyPass,
		"postgres://app@db/app?SSLPassword=" + keyPass,
		"postgres://app@db/app?%73slpassword=" + keyPass,
		"host=db user=app password=" + pw + " sslpassword=" + keyPass + " dbname=app",
		"host=db sslpassword='" + keyPass + " x' password = '" + pw + "'",
	} {
		got := consumer.RedactDSN(dsn)
		if strings.Contains(got, pw) || strings.Contains(got, keyPass) {
			t.Errorf("RedactDSN(%q) = %q: a secret is still there", dsn, got)
		}
		if !strings.Contains(got, "xxxxx") {
			t.Errorf("RedactDSN(%q) = %q: no redaction marker", dsn, got)
		}
		secrets := consumer.DSNSecrets(dsn)
		if !slices.Contains(secrets, keyPass) && !slices.Contains(secrets, keyPass+" x") {
			t.Errorf("DSNSecrets(%q) = %q: the sslpassword is missing", dsn, secrets)
		}
	}
}

func TestRedactingHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(consumer.RedactingHandler(slog.NewJSONHandler(&buf, nil), "hunter22", "s3cret"))
	log.With("dsn", "postgres://u:hunter22@h/db").Info("connecting with s3cret",
		"err", errors.New("auth failed for password hunter22"),
		slog.Group("g", "pw", "x-hunter22-x"))
	out := buf.String()
	if strings.Contains(out, "hunter22") || strings.Contains(out, "s3cret") {
		t.Fatalf("secret in log: %s", out)
	}
	if !strings.Contains(out, "xxxxx") {
		t.Fatalf("no redaction marker: %s", out)
	}
}

func TestConfigLogValueHasNoSecrets(t *testing.T) {
	var buf bytes.Buffer
	c := validConfig()
	c.SASL = consumer.SASL{Mechanism: consumer.SASLScramSHA512, Username: "svc", Password: "sasl-pw-123"}
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "config", c)
	if s := buf.String(); strings.Contains(s, "s3cret-pw") || strings.Contains(s, "sasl-pw-123") {
		t.Fatalf("secret in config log: %s", s)
	}
}

func TestParseTraceparent(t *testing.T) {
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tc, ok := consumer.ParseTraceparent(valid)
	if !ok || !tc.Sampled() || tc.Traceparent() != valid {
		t.Fatalf("ParseTraceparent(%q) = %+v, %v", valid, tc, ok)
	}
	for _, bad := range []string{
		"",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // short
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx", // extra field with version 00
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	} {
		if _, ok := consumer.ParseTraceparent(bad); ok {
			t.Errorf("ParseTraceparent(%q) accepted", bad)
		}
	}
	if _, ok := consumer.ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-future"); !ok {
		t.Error("a future version with extra fields was rejected")
	}
}

func TestIdempotencyKeyTransport(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer srv.Close()
	client := &http.Client{Transport: &consumer.IdempotencyKeyTransport{}}
	ev := &consumer.Event{ID: uuid.Must(uuid.NewV7())}
	tc, _ := consumer.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	tc.State = "vendor=1"
	ctx := consumer.ContextWithTrace(consumer.ContextWithEvent(context.Background(), ev), tc)
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Get("Idempotency-Key") != ev.ID.String() {
		t.Errorf("Idempotency-Key = %q, want %s", got.Get("Idempotency-Key"), ev.ID)
	}
	if got.Get("traceparent") != tc.Traceparent() || got.Get("tracestate") != "vendor=1" {
		t.Errorf("trace headers not forwarded: %v", got)
	}
	if req.Header.Get("Idempotency-Key") != "" {
		t.Error("the caller's request was modified")
	}
	// Without an event in the context: no header.
	req, _ = http.NewRequest("GET", srv.URL, nil)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Get("Idempotency-Key") != "" {
		t.Error("key set without an event")
	}
}

// TestHandlerContext: the handler's context carries the event and the trace
// context of the record's traceparent header.
func TestHandlerContext(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	id := newID(t)
	msg := event(id, 0, `,"occurredAt":"2025-01-02T03:04:05Z"`)
	msg.Headers = []kafkaHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}
	e.kafka.Produce(t, e.topic, msg)
	type seen struct {
		ev    consumer.Event
		trace string
		fromC bool
	}
	ch := make(chan seen, 1)
	r := e.start(e.config(), func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		tc, _ := consumer.TraceFromContext(ctx)
		cev, ok := consumer.EventFromContext(ctx)
		ch <- seen{ev: *ev, trace: tc.Traceparent(), fromC: ok && cev == ev}
		return nil
	})
	defer func() { _ = r.stop(t) }()
	var s seen
	select {
	case s = <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("handler not called")
	}
	if s.ev.ID != id || s.ev.Type != "test" || s.ev.Topic != e.topic || s.ev.Offset != 0 || !s.ev.Deduplicated {
		t.Errorf("event = %+v", s.ev)
	}
	if !s.ev.OccurredAt.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("occurredAt = %v", s.ev.OccurredAt)
	}
	if s.trace != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("trace = %q", s.trace)
	}
	if !s.fromC {
		t.Error("EventFromContext did not return the event")
	}
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra")
	f.Add("ff-00000000000000000000000000000000-0000000000000000-00")
	f.Fuzz(func(t *testing.T, s string) {
		tc, ok := consumer.ParseTraceparent(s)
		if !ok {
			return
		}
		// A valid header renders back to its first 55 characters.
		if got := tc.Traceparent(); got != s[:55] {
			t.Fatalf("ParseTraceparent(%q) renders as %q", s, got)
		}
	})
}
