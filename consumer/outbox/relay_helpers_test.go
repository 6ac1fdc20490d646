package outbox_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
)

// relayEnv is an outbox, a broker and the relays started on them.
type relayEnv struct {
	pool   *pgxpool.Pool
	tbl    outbox.Table
	kafka  *consumertest.Kafka
	relays []*runningRelay
}

type runningRelay struct {
	relay   *outbox.Relay
	metrics *outbox.Metrics
	cancel  context.CancelFunc
	done    chan struct{}
}

func newRelayEnv(t *testing.T) *relayEnv {
	pool, tbl := newOutbox(t)
	return &relayEnv{pool: pool, tbl: tbl, kafka: consumertest.NewKafka(t)}
}

// start runs a relay until the test ends (or stop).
func (e *relayEnv) start(t *testing.T, modify func(*outbox.Config)) *runningRelay {
	t.Helper()
	m, err := outbox.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := outbox.Config{
		Table:          e.tbl,
		ConnConfig:     e.pool.Config().ConnConfig.Copy(),
		Brokers:        e.kafka.Brokers(),
		PollInterval:   100 * time.Millisecond,
		PublishTimeout: time.Second,
		Backoff:        50 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		Metrics:        m,
		Logger:         testLogger(),
	}
	cfg.TakeoverDelay = 2*cfg.PublishTimeout + 100*time.Millisecond
	if modify != nil {
		modify(&cfg)
	}
	r, err := outbox.NewRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runningRelay{relay: r, metrics: m, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rr.done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	t.Cleanup(rr.stop)
	e.relays = append(e.relays, rr)
	return rr
}

// testLogger discards the relay's log unless OUTBOX_TEST_LOGS is set.
func testLogger() *slog.Logger {
	w := io.Writer(io.Discard)
	if os.Getenv("OUTBOX_TEST_LOGS") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (rr *runningRelay) stop() {
	rr.cancel()
	select {
	case <-rr.done:
	case <-time.After(30 * time.Second):
		panic("relay did not stop within 30s")
	}
}

func (rr *runningRelay) owner() bool { return testutil.ToFloat64(rr.metrics.Owner) == 1 }

// emit emits one event in a transaction of its own and returns its id.
func (e *relayEnv) emit(t *testing.T, topic, key string, payload []byte) uuid.UUID {
	t.Helper()
	ctx := testCtx(t)
	var id uuid.UUID
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		id, err = outbox.Emit(ctx, tx, e.tbl, outbox.Message{Topic: topic, Key: keyBytes(key), Payload: payload})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func keyBytes(k string) []byte {
	if k == "" {
		return nil
	}
	return []byte(k)
}

// record is one record read back from the broker.
type record struct {
	id, key   string
	partition int
	offset    int64
}

// readTopic reads every record of topic's partitions from the beginning
// until it has want of them (or wait passes), in offset order per
// partition.
func (e *relayEnv) readTopic(t *testing.T, topic string, partitions, want int, wait time.Duration) []record {
	t.Helper()
	var (
		mu  sync.Mutex
		out []record
	)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var wg sync.WaitGroup
	for p := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.kafka.Brokers(), Topic: topic, Partition: p, MaxWait: 50 * time.Millisecond})
			defer r.Close()
			for {
				mu.Lock()
				n := len(out)
				mu.Unlock()
				if n >= want {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				m, err := r.ReadMessage(rctx)
				rcancel()
				if errors.Is(err, context.DeadlineExceeded) {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				if err != nil {
					t.Errorf("reading %s[%d]: %v", topic, p, err)
					return
				}
				id := ""
				for _, h := range m.Headers {
					if h.Key == "eventId" {
						id = string(h.Value)
					}
				}
				mu.Lock()
				out = append(out, record{id: id, key: string(m.Key), partition: p, offset: m.Offset})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readDistinct reads topic until it holds want distinct events (or for 60
// s), and returns every record read and the event ids in the order of
// their first publication.
func (e *relayEnv) readDistinct(t *testing.T, topic string, partitions, want int) (got []record, firsts []string) {
	t.Helper()
	for n, deadline := want, time.Now().Add(60*time.Second); time.Now().Before(deadline); {
		got = e.readTopic(t, topic, partitions, n, 10*time.Second)
		seen := map[string]bool{}
		firsts = firsts[:0]
		for _, r := range got {
			if !seen[r.id] {
				seen[r.id] = true
				firsts = append(firsts, r.id)
			}
		}
		if len(firsts) >= want {
			break
		}
		n = len(got) + want - len(firsts) // the repeats take places too
	}
	return got, firsts
}

// beginWithXid begins a transaction that has taken its transaction id (an
// open one holds the relay's horizon), rolled back when the test ends
// unless committed.
func (e *relayEnv) beginWithXid(t *testing.T) pgx.Tx {
	t.Helper()
	ctx := testCtx(t)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	return tx
}
