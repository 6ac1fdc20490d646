// Package pythonconfluentkafka_test runs the Python example (confluent-kafka
// and psycopg 3 from Debian's packages) against a dedup table made by
// cmd/dedupctl, PostgreSQL and the project's Kafka-protocol broker.
package pythonconfluentkafka_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

var table = dedup.Table{Schema: "billing", Name: "processed_event"}

// python returns an interpreter that imports confluent_kafka and psycopg:
// python3 on PATH, else Debian's /usr/bin/python3 (a pyenv python3 on PATH
// does not see Debian's packages). Without one the test skips, except under
// CI, where .ci/run installs them.
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if path, err := exec.LookPath(p); err == nil {
			if exec.Command(path, "-c", "import confluent_kafka, psycopg").Run() == nil {
				return path
			}
		}
	}
	msg := "python3 with confluent_kafka and psycopg is needed (Debian: apt-get install python3-confluent-kafka python3-psycopg)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI must have them (.ci/run installs them)")
	}
	t.Skip(msg)
	return ""
}

func v7(at time.Time) string {
	u := uuid.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(at.UnixMilli()))
	copy(u[:6], b[2:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u.String()
}

// TestPythonBatchConsumer: 300 events as 400 records (a third re-sent, half
// of those on another partition), an out-of-window id, a UUID v4 id and a
// value that is not JSON; the consumer claims each batch with one _claim
// call in the transaction of its ledger rows: every event takes effect once
// (one ledger row, one dedup row), the three bad records are skipped, and
// the group commits every offset.
func TestPythonBatchConsumer(t *testing.T) {
	py := python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	bin := filepath.Join(t.TempDir(), "dedupctl")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/idempotency-dev/operator/cmd/dedupctl").CombinedOutput(); err != nil {
		t.Fatalf("building dedupctl: %v\n%s", err, out)
	}
	create := exec.CommandContext(ctx, bin, "create", "--schema", table.Schema, "--premake", "2")
	create.Env = append(os.Environ(), "DATABASE_URL="+dsn)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("dedupctl create: %v\n%s", err, out)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (id bigserial PRIMARY KEY, event_id uuid NOT NULL, consumer_group text NOT NULL,
		account text NOT NULL, amount_cents bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}

	brokers := consumertest.NewKafka(t).Brokers()
	const topic, group, parts, unique, dups = "payments", "billing", 3, 300, 100
	if err := consumertest.CreateTopic(ctx, brokers, topic, parts, nil); err != nil {
		t.Fatal(err)
	}
	var msgs []kafka.Message
	for i := range unique {
		v, _ := json.Marshal(map[string]any{"eventId": v7(time.Now()), "account": fmt.Sprintf("acct-%d", i%20), "amountCents": 100 + i})
		msgs = append(msgs, kafka.Message{Partition: i % parts, Value: v})
	}
	for i := range dups {
		m := msgs[i*3]
		if i%2 == 1 {
			m.Partition = (m.Partition + 1) % parts
		}
		msgs = append(msgs, m)
	}
	bad := func(id string) []byte {
		v, _ := json.Marshal(map[string]any{"eventId": id, "amountCents": 1})
		return v
	}
	msgs = append(msgs, kafka.Message{Partition: 0, Value: bad(v7(time.Now().Add(-90 * 24 * time.Hour)))},
		kafka.Message{Partition: 1, Value: bad(uuid.New().String())}, kafka.Message{Partition: 2, Value: []byte("not json")})
	w := consumertest.NewWriter(brokers, topic)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	logPath := filepath.Join(t.TempDir(), "consumer.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "consumer.py")
	cmd.Env = append(os.Environ(), "KAFKA_BROKERS="+strings.Join(brokers, ","), "KAFKA_TOPIC="+topic, "KAFKA_GROUP_ID="+group,
		"DATABASE_URL="+dsn, "DEDUP_CLAIM_FUNCTION="+table.ClaimFunction(), "BATCH_SIZE=100", "SESSION_TIMEOUT_MS=6000")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	output := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("consumer.py output:\n%s", output())
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		lag, err := consumertest.GroupLag(ctx, brokers, group, topic, parts)
		if err == nil && lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not commit every record within 2 minutes (lag %d, %v)", lag, err)
		}
		select {
		case err := <-done:
			t.Fatalf("consumer.py exited: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("consumer.py: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("consumer.py did not stop within 30s of SIGTERM")
	}

	var counts map[string]int
	sc := bufio.NewScanner(bytes.NewReader([]byte(output())))
	for sc.Scan() {
		var l struct {
			Msg    string         `json:"msg"`
			Counts map[string]int `json:"counts"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "counts" {
			counts = l.Counts
		}
	}
	if counts["new"] != unique || counts["duplicate"] != dups || counts["skip:outside_window"] != 1 || counts["skip:not_v7"] != 1 || counts["skip:not_json"] != 1 {
		t.Errorf("counts %v; want new=%d duplicate=%d and one each of skip:outside_window, skip:not_v7, skip:not_json", counts, unique, dups)
	}
	var rows, distinct, dedupRows int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM ledger WHERE consumer_group = $1`, group).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table.String()+` WHERE consumer_group = $1`, group).Scan(&dedupRows); err != nil {
		t.Fatal(err)
	}
	if rows != unique || distinct != unique || dedupRows != unique {
		t.Errorf("%d ledger rows for %d events and %d dedup rows; want %d of each", rows, distinct, dedupRows, unique)
	}
}
