package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

func produceN(t testing.TB, e *env, n int) {
	t.Helper()
	var msgs []kafka.Message
	for i := range n {
		msgs = append(msgs, event(newID(t), i%e.parts, ""))
	}
	e.kafka.Produce(t, e.topic, msgs...)
}

func waitNotReady(t testing.TB, c *consumer.Consumer, want string) {
	t.Helper()
	waitFor(t, 20*time.Second, "not ready ("+want+")", func() (bool, string) {
		err := c.Ready(context.Background())
		return err != nil && strings.Contains(err.Error(), want), "ready: " + errString(err)
	})
}

func waitReady(t testing.TB, c *consumer.Consumer) {
	t.Helper()
	waitFor(t, 30*time.Second, "ready", func() (bool, string) {
		err := c.Ready(context.Background())
		return err == nil, errString(err)
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func assertRunning(t testing.TB, r *running) {
	t.Helper()
	select {
	case err := <-r.done:
		t.Fatalf("Run returned during an outage: %v", err)
	default:
	}
}

// TestDatabaseOutage: with PostgreSQL down the consumer stays up, reports
// not ready, dead-letters nothing and commits nothing; when it is back, the
// held events are processed once.
func TestDatabaseOutage(t *testing.T) {
	pg, err := consumertest.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	e.dsn = pg.URL("postgres")
	pool, err := pgxpool.New(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	e.pool = pool
	createTables(t, pool, e.table)

	r := e.start(e.config(), nil)
	produceN(t, e, 20)
	e.waitCaughtUp(t, 30*time.Second)
	waitReady(t, r.c)

	pool.Reset() // the test's own connections would only see errors
	if err := pg.StopServer(); err != nil {
		t.Fatal(err)
	}
	// Idle: the readiness ping notices the outage without any batch.
	waitNotReady(t, r.c, "database")
	produceN(t, e, 20)
	waitFor(t, 10*time.Second, "a failed batch", func() (bool, string) {
		return strings.Contains(e.logBuf.String(), "batch transaction failed"), ""
	})
	time.Sleep(time.Second)
	assertRunning(t, r)
	co, err := e.committed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if co[0] != 20 {
		t.Fatalf("offset moved to %d during the outage, want 20", co[0])
	}
	if dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, time.Second); len(dl) != 0 {
		t.Fatalf("%d dead letters during a database outage", len(dl))
	}

	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(t, 60*time.Second)
	waitReady(t, r.c)
	if rows, distinct := e.effects(t); rows != 40 || distinct != 40 {
		t.Fatalf("%d effect rows (%d distinct), want 40", rows, distinct)
	}
	if !strings.Contains(e.logBuf.String(), "database reachable again") {
		t.Error("recovery was not logged")
	}
	if strings.Contains(e.logBuf.String(), pg.Password()) {
		t.Error("the database password appears in the log")
	}
}

// TestBrokerOutage: the broker refuses every request for a while (connections
// closed). The consumer stays up and not ready, then rejoins and finishes.
func TestBrokerOutage(t *testing.T) {
	e := newEnv(t, withPartitions(2))
	e.dumpLogsOnFailure(t)
	var down atomic.Bool
	cluster := e.kafka.Cluster()
	cluster.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if down.Load() {
			return nil, errors.New("broker down (test)"), true
		}
		return nil, nil, false
	})
	r := e.start(e.config(), nil)
	produceN(t, e, 30)
	e.waitCaughtUp(t, 30*time.Second)
	waitReady(t, r.c)

	down.Store(true)
	waitNotReady(t, r.c, "")
	time.Sleep(2 * time.Second)
	assertRunning(t, r)
	down.Store(false)

	produceN(t, e, 30)
	e.waitCaughtUp(t, 60*time.Second)
	waitReady(t, r.c)
	if rows, distinct := e.effects(t); rows != 60 || distinct != 60 {
		t.Fatalf("%d effect rows (%d distinct), want 60", rows, distinct)
	}
}

// TestDeadLetterTopicUnwritable: when the dead letter can't be written the
// offset stays before the bad record (it is neither handled nor
// dead-lettered yet); once the topic is back, it is written and the
// partition moves on.
func TestDeadLetterTopicUnwritable(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	r := e.start(e.config(), nil)
	produceN(t, e, 5)
	e.waitCaughtUp(t, 30*time.Second)

	client := &kafka.Client{Addr: kafka.TCP(e.kafka.Brokers()...), Timeout: 10 * time.Second}
	resp, err := client.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{e.dlq}})
	if err != nil || resp.Errors[e.dlq] != nil {
		t.Fatalf("deleting the dead-letter topic: %v %v", err, resp)
	}
	e.kafka.Produce(t, e.topic, kafka.Message{Value: []byte("garbage")}, event(newID(t), 0, ""))
	waitNotReady(t, r.c, "deadLetter")
	co, err := e.committed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if co[0] != 5 {
		t.Fatalf("offset %d moved past the record whose dead letter failed (5)", co[0])
	}
	e.kafka.MustCreateTopic(t, e.dlq, 1)
	e.waitCaughtUp(t, 60*time.Second)
	if dl := readAll(t, e.kafka.Brokers(), e.dlq, 0, 1, 10*time.Second); len(dl) != 1 || header(dl[0], consumer.HeaderDLQReason) != "not_json" {
		t.Fatalf("dead letters after recovery: %d", len(dl))
	}
	if rows, _ := e.effects(t); rows != 6 {
		t.Fatalf("%d effect rows, want 6", rows)
	}
}
