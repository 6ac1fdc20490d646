package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/replay"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestBenchReplay compares, in one run on the same broker, database, events
// and SQL sink, the throughput of a dead-letter replay (Consumer.Replay over
// N dead letters) with the live consumer's (Consumer.Run over the N events
// they were made from); target >= 0.8x.
//
// The dead letters are the runtime's own: a first group whose handler
// rejects every event (Permanent) dead-letters the N events, with the
// headers the runtime writes. Each round then runs the live consumer in a
// new group over the topic and a replay of every dead letter under another
// new group (so that every id is new to both and each applies N effects
// through the same sink), and reports the pair's ratio; the median over the
// rounds is the result. Both are timed from their first handler call to the
// end (the live group's committed offsets at the end of every partition; the
// replay's return, which is after its durable positions and counts).
//
// It runs only with CONSUMER_BENCH_REPLAY=1 (make bench, BENCH=replay):
//
//	CONSUMER_BENCH_REPLAY=1 go test ./consumer/ -run '^TestBenchReplay$' -count=1 -v -timeout 30m
//
// CONSUMER_BENCH_EVENTS sets N (default 20000), CONSUMER_BENCH_ROUNDS the
// rounds (default 5). The last line is "RESULT replay eps=... vs_consumer=...".
func TestBenchReplay(t *testing.T) {
	if os.Getenv("CONSUMER_BENCH_REPLAY") == "" {
		t.Skip("set CONSUMER_BENCH_REPLAY=1 to run the benchmark")
	}
	n := 20000
	if s := os.Getenv("CONSUMER_BENCH_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	rounds := 5
	if s := os.Getenv("CONSUMER_BENCH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	const parts = 4
	ctx := context.Background()
	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "events", parts)
	k.MustCreateTopic(t, "events.dlq", parts)
	pool, err := pgxpool.New(ctx, consumertest.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := dedup.Table{Interval: dedup.Daily}
	createTables(t, pool, table)
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (event_id uuid NOT NULL, amount numeric NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	handler, err := sink.SQL(sink.SQLConfig{Statement: `INSERT INTO ledger (event_id, amount) VALUES ($1, ($2::jsonb->>'amount')::numeric)`})
	if err != nil {
		t.Fatal(err)
	}

	w := k.Writer("events")
	var batch []kafka.Message
	for i := range n {
		id := uuid.Must(uuid.NewV7())
		// Keyed by id: the dead-letter writer partitions by key hash, so
		// the dead letters spread as evenly as the events (a replay, like the
		// live consumer, takes as long as its fullest partition).
		batch = append(batch, kafka.Message{Key: []byte(id.String()),
			Value: []byte(fmt.Sprintf(`{"eventId":%q,"type":"payment","amount":"%d.50"}`, id, i%1000))})
		if len(batch) == 1000 || i == n-1 {
			if err := w.WriteMessages(ctx, batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	w.Close()

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	config := func(group string) consumer.Config {
		return consumer.Config{Brokers: k.Brokers(), Topic: "events", Group: group, Pool: pool, Table: table, Logger: quiet,
			SessionTimeout: 6 * time.Second, HeartbeatInterval: time.Second}
	}
	// timed wraps the sink: the time of its first call.
	var last atomic.Int64 // the last call's time (UnixNano), for the log
	timed := func() (consumer.Handler, *atomic.Pointer[time.Time]) {
		var first atomic.Pointer[time.Time]
		return func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
			now := time.Now()
			if first.Load() == nil {
				first.CompareAndSwap(nil, &now)
			}
			last.Store(now.UnixNano())
			return handler(ctx, tx, ev)
		}, &first
	}
	tail := func() time.Duration { return time.Since(time.Unix(0, last.Load())) }

	// The dead letters: a group whose handler rejects every event.
	reject := func(context.Context, pgx.Tx, *consumer.Event) error {
		return consumer.Permanent(errors.New("rejected until fixed"))
	}
	c, err := consumer.New(config("bug"), reject)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t0 := time.Now()
	waitGroupDone(t, k.Brokers(), "bug", "events", parts, 10*time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("dead-lettered %d events in %v", n, time.Since(t0).Round(time.Millisecond))

	live := func(group string) float64 {
		h, first := timed()
		c, err := consumer.New(config(group), h)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		waitGroupDone(t, k.Brokers(), group, "events", parts, 10*time.Minute)
		el := time.Since(*first.Load())
		t.Logf("live %s: %v, of which after the last handler call %v", group, el.Round(time.Millisecond), tail().Round(time.Millisecond))
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return float64(n) / el.Seconds()
	}
	replayed := func(group, id string) float64 {
		h, first := timed()
		c, err := consumer.New(config(group), h)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Replay(ctx, replay.Spec{ID: id, Mode: replay.ModeApply})
		if err != nil {
			t.Fatal(err)
		}
		el := time.Since(*first.Load())
		t.Logf("replay %s: %v, of which after the last handler call %v", id, el.Round(time.Millisecond), tail().Round(time.Millisecond))
		if want := (replay.Counts{Selected: int64(n), Applied: int64(n)}); res.Counts != want || !res.Complete {
			t.Fatalf("replay %s: %+v, want counts %+v", id, res, want)
		}
		return float64(n) / el.Seconds()
	}

	t.Logf("warm-up: live %.0f, replay %.0f records/s", live("warm-live"), replayed("warm-replay", "warm"))
	var lives, replays, ratios []float64
	for i := range rounds {
		g := strconv.Itoa(i)
		// Paired, in alternating order, so that a drift in the machine's
		// load favours neither.
		var l, r float64
		if i%2 == 0 {
			l, r = live("live-"+g), replayed("replay-"+g, "r"+g)
		} else {
			r, l = replayed("replay-"+g, "r"+g), live("live-"+g)
		}
		lives, replays, ratios = append(lives, l), append(replays, r), append(ratios, r/l)
		t.Logf("round %d: live consumer %.0f, replay %.0f records/s (%.2fx)", i, l, r, r/l)
	}
	// Every live run and every replay applied each event once.
	var rows, distinct int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM ledger`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if want := int64(2 * (rounds + 1) * n); rows != want || distinct != int64(n) {
		t.Fatalf("ledger: %d rows over %d ids; want %d over %d", rows, distinct, want, n)
	}
	ratio := median(ratios)
	fmt.Printf("RESULT replay eps=%.0f vs_consumer=%.2f consumer_eps=%.0f events=%d rounds=%d pass=%v\n",
		median(replays), ratio, median(lives), n, rounds, ratio >= 0.8)
}
