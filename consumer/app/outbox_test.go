package app

import (
	"context"
	"io"
	"net"
	"net/http"
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

// TestOutboxRelaySubcommand_HealthzFailsWhileItCannotPublish (review
// finding M6): the owner's broker takes connections and never answers (a
// hung broker, a TCP black hole). Every publish times out and the relay,
// alive, keeps the ownership lock: /healthz must turn unhealthy once the
// owner has rows it has not published for the stall timeout (6 publish
// timeouts), so that Kubernetes restarts it and a standby takes over.
func TestOutboxRelaySubcommand_HealthzFailsWhileItCannotPublish(t *testing.T) {
	dsn := consumertest.DatabaseURL(t)
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }() // read, never answer
		}
	}()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	_ = probe.Close()
	env := map[string]string{
		envvars.Brokers:              hole.Addr().String(),
		envvars.DatabaseURL:          dsn,
		envvars.ListenAddr:           addr,
		envvars.OutboxOwner:          "outbox-relay-test",
		envvars.OutboxPollInterval:   "100ms",
		envvars.OutboxPublishTimeout: "300ms",
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
	healthz := func() int {
		res, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return 0
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The relay owns the (empty) stream: healthy.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var owner bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks l JOIN public.outbox_relay r ON l.objid = (r.lock_key & x'ffffffff'::bigint)::oid WHERE l.locktype = 'advisory' AND l.granted)`).Scan(&owner)
		if err == nil && owner && healthz() == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not own the stream and answer /healthz 200 within 30s (%v, %d)\nlog:\n%s", err, healthz(), stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the takeover delay (2 x 300ms) passes
	if code := healthz(); code != http.StatusOK {
		t.Fatalf("/healthz %d for an owner with nothing to publish, want 200", code)
	}
	if _, err := conn.Exec(ctx, `SELECT public.outbox_emit('invoices', 'order-1'::bytea, '{}'::bytea)`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for healthz() == http.StatusOK {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("/healthz stayed 200 for 15s while the owner could not publish a row (publish timeout 300ms)\nlog:\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Counted from the owner's last progress: its last look that found
	// nothing, up to a poll interval before the emit.
	if waited := time.Since(start); waited < 6*300*time.Millisecond-500*time.Millisecond {
		t.Errorf("/healthz turned unhealthy after %s, well before the stall timeout (6 x 300ms)", waited)
	}
}
