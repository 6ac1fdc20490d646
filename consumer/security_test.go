package consumer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// selfSigned returns a server certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	c, err := consumertest.NewSelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	return c.Certificate, c.Pool
}

// TestTLSAndSASL: the group, the partition readers and the dead-letter writer
// all connect over TLS with SASL/SCRAM-SHA-512, and the password stays out
// of the log.
func TestTLSAndSASL(t *testing.T) {
	cert, roots := selfSigned(t)
	const user, pass = "svc-consumer", "scram-secret-pw"
	k := consumertest.NewKafka(t,
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}}),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", user, pass),
		kfake.SeedTopics(2, "events", "events.dlq"),
	)
	e := &env{t: t, kafka: k, parts: 2, topic: "events", dlq: "events.dlq", group: "g1", logBuf: &consumertest.SyncBuffer{}}
	e.dumpLogsOnFailure(t)
	e.dsn = consumertest.DatabaseURL(t)
	pool := newPoolFor(t, e.dsn)
	e.pool = pool
	e.table.Interval = "Daily"
	createTables(t, pool, e.table)

	clientTLS := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	mech, err := scram.Mechanism(scram.SHA512, user, pass)
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{
		Addr: kafka.TCP(k.Brokers()...), Topic: "events", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Transport: &kafka.Transport{TLS: clientTLS, SASL: mech},
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msgs []kafka.Message
	for range 20 {
		msgs = append(msgs, event(newID(t), 0, ""))
	}
	msgs = append(msgs, kafka.Message{Value: []byte("not json")})
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	cfg := e.config(func(c *consumer.Config) {
		c.TLS = clientTLS
		c.SASL = consumer.SASL{Mechanism: consumer.SASLScramSHA512, Username: user, Password: pass}
	})
	r := e.start(cfg, nil)
	waitFor(t, 30*time.Second, "20 effects and a dead letter", func() (bool, string) {
		rows, _ := e.effects(t)
		dl := metricValue(t, scrape(t, r.c), "idempotent_consumer_dead_lettered_total")
		return rows == 20 && dl == 1, ""
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.logBuf.String(), pass) {
		t.Fatal("the SASL password appears in the log")
	}

	// Wrong password: the consumer stays up and not ready.
	bad := e.config(func(c *consumer.Config) {
		c.TLS = clientTLS
		c.SASL = consumer.SASL{Mechanism: consumer.SASLScramSHA512, Username: user, Password: "wrong-password"}
	})
	r = e.start(bad, nil)
	waitNotReady(t, r.c, "")
	time.Sleep(time.Second)
	assertRunning(t, r)
	if err := r.c.Ready(context.Background()); err == nil {
		t.Fatal("ready with a wrong SASL password")
	}
}
