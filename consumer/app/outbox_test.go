package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/internal/syncbuf"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// TestOutboxRelaySubcommand: `consumer outbox-relay`, configured by
// CONSUMER_* variables with an owner, creates the outbox and its partitions
// and publishes an event emitted through the SQL function; -h prints no
// database URL.
func TestOutboxRelaySubcommand(t *testing.T) {
	dsn := consumertest.DatabaseURL(t)
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "invoices", 1)
	env := map[string]string{
		envvars.Brokers:            strings.Join(k.Brokers(), ","),
		envvars.DatabaseURL:        dsn,
		envvars.ListenAddr:         "127.0.0.1:0",
		envvars.OutboxOwner:        "outbox-relay-test",
		envvars.OutboxPollInterval: "100ms",
	}
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() { done <- runOutboxRelay(runCtx, nil, func(k string) string { return env[k] }, &stderr) }()
	defer func() {
		stop()
		if code := <-done; code != ExitOK {
			t.Errorf("exit code %d, log:\n%s", code, stderr.String())
		}
	}()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var id string
	for deadline := time.Now().Add(30 * time.Second); ; {
		err = conn.QueryRow(ctx, `SELECT public.outbox_emit('invoices', 'order-1'::bytea, '{"amount": 12}'::bytea)::text`).Scan(&id)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("emitting: %v\nlog:\n%s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond) // the relay is still creating the table
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers(), Topic: "invoices", Partition: 0})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("reading: %v\nlog:\n%s", err, stderr.String())
	}
	if string(m.Key) != "order-1" || len(m.Headers) == 0 || m.Headers[0].Key != "eventId" || string(m.Headers[0].Value) != id {
		t.Errorf("record key %q headers %v, want key order-1 and eventId %s", m.Key, m.Headers, id)
	}

	var help syncbuf.Buffer
	if code := runOutboxRelay(ctx, []string{"-h"}, func(k string) string { return env[k] }, &help); code != ExitOK {
		t.Errorf("-h: exit code %d", code)
	}
	if strings.Contains(help.String(), dsn) || !strings.Contains(help.String(), "[$"+envvars.OutboxTable+"]") {
		t.Errorf("-h printed the database URL or not the variables:\n%s", help.String())
	}
}

// TestOutboxRelaySubcommand_KafkaSecurity: the relay reads the consumer's
// TLS and SASL variables; a wrong one is a configuration error that names
// it and does not print the SASL password.
func TestOutboxRelaySubcommand_KafkaSecurity(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{envvars.SASLMechanism: "GSSAPI", envvars.SASLPassword: "s3cret-pw"}, envvars.SASLMechanism},
		{map[string]string{envvars.TLSEnabled: "maybe"}, envvars.TLSEnabled},
		{map[string]string{envvars.TLSCAFile: "/nonexistent/ca.pem"}, envvars.TLSCAFile},
	} {
		tc.env[envvars.Brokers] = "127.0.0.1:9"
		tc.env[envvars.DatabaseURL] = "postgres://u:p@127.0.0.1:9/db"
		var stderr syncbuf.Buffer
		code := runOutboxRelay(context.Background(), nil, func(k string) string { return tc.env[k] }, &stderr)
		if code != ExitConfig || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "s3cret-pw") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %s without the password", tc.env, code, stderr.String(), ExitConfig, tc.want)
		}
	}
}
