package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// produceIDs writes n fresh events round-robin over the partitions and
// returns their ids.
func produceIDs(t testing.TB, e *env, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	msgs := make([]kafka.Message, n)
	for i := range n {
		ids[i] = newID(t)
		msgs[i] = event(ids[i], i%e.parts, "")
	}
	e.kafka.Produce(t, e.topic, msgs...)
	return ids
}

// effectsOf counts the effect rows of ids.
func (e *env) effectsOf(t testing.TB, ids []uuid.UUID) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM effect WHERE event_id = ANY($1)`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStartLatestCommitsStartOffset (issue 12, defect 6): with StartOffset
// latest, a member that crashes before its first offset commit must not make
// the next owner resolve "latest" again and skip what arrived meanwhile.
func TestStartLatestCommitsStartOffset(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	before := produceIDs(t, e, 3) // before the group exists: latest skips them
	cfg := e.config(func(c *consumer.Config) { c.StartOffset = consumer.StartLatest })

	crash := errors.New("crash before the first offset commit")
	fired := make(chan struct{})
	var once sync.Once
	a := e.start(cfg, nil, func(c *consumer.Consumer) {
		consumer.SetAfterDBCommitHook(c, func(int, int64) error {
			once.Do(func() { close(fired) })
			return crash
		})
	})
	waitReady(t, a.c)
	// The reader takes its position some time after the assignment: produce
	// one record at a time until the first batch reaches the database.
	for range 50 {
		produceIDs(t, e, 1)
		select {
		case <-fired:
		case <-time.After(200 * time.Millisecond):
			continue
		}
		break
	}
	if err := a.wait(t, 30*time.Second); !errors.Is(err, crash) {
		t.Fatalf("a returned %v, want its crash", err)
	}

	later := produceIDs(t, e, 5) // while no member runs
	b := e.start(cfg, nil)
	waitFor(t, 20*time.Second, "the records produced while no member ran to take effect", func() (bool, string) {
		n := e.effectsOf(t, later)
		return n == len(later), fmt.Sprintf("%d of %d", n, len(later))
	})
	e.waitCaughtUp(t, 20*time.Second)
	if n := e.effectsOf(t, before); n != 0 {
		t.Fatalf("%d effects of records produced before the group existed; StartOffset latest skips them", n)
	}
	rows, distinct := e.effects(t)
	if rows != distinct {
		t.Fatalf("%d effect rows for %d distinct ids", rows, distinct)
	}
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestScopeMismatchRefused (issue 12, defect 7): Run refuses a dedup table of
// the other scope, naming both.
func TestScopeMismatchRefused(t *testing.T) {
	for _, tc := range []struct{ table, configured dedup.Scope }{
		{dedup.ScopeConsumerGroup, dedup.ScopeGlobal},
		{dedup.ScopeGlobal, dedup.ScopeConsumerGroup},
	} {
		t.Run(string(tc.configured)+"_on_"+string(tc.table), func(t *testing.T) {
			e := newEnv(t)
			e.dumpLogsOnFailure(t)
			tab := dedup.Table{Name: "dedup_" + strings.ToLower(string(tc.table)), Scope: tc.table}
			eng, err := dedup.NewEngine(e.pool, tab)
			if err != nil {
				t.Fatal(err)
			}
			if err := eng.EnsureTable(context.Background(), "test"); err != nil {
				t.Fatal(err)
			}
			produceIDs(t, e, 3)
			r := e.start(e.config(func(c *consumer.Config) { c.Table = dedup.Table{Name: tab.Name, Scope: tc.configured} }), nil)
			err = r.wait(t, 20*time.Second)
			if err == nil {
				t.Fatal("Run = nil, want an error naming both scopes")
			}
			for _, want := range []string{"public." + tab.Name, "keyed for scope " + string(tc.table), "configured with scope " + string(tc.configured)} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("Run's error %q does not name %q", err, want)
				}
			}
			if rows, _ := e.effects(t); rows != 0 {
				t.Fatalf("%d effects under the wrong scope", rows)
			}
		})
	}
}

// TestPositionsTableMissing: a dedup table without its positions table (made
// by an older version) keeps the consumer not ready with a message naming
// it, until EnsureTable adds it.
func TestPositionsTableMissing(t *testing.T) {
	e := newEnv(t)
	e.dumpLogsOnFailure(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `DROP TABLE public.processed_event_offsets`); err != nil {
		t.Fatal(err)
	}
	ids := produceIDs(t, e, 10)
	r := e.start(e.config(), nil)
	waitNotReady(t, r.c, "positions table missing: public.processed_event_offsets")
	eng, err := dedup.NewEngine(e.pool, e.table)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(t, 30*time.Second)
	if n := e.effectsOf(t, ids); n != len(ids) {
		t.Fatalf("%d effects, want %d", n, len(ids))
	}
}

// TestRestartsFromDatabasePosition: when the database lost the last batches
// (their effects, dedup rows and positions) while Kafka kept their offsets,
// the next assignment starts from the database's position and redoes them
// once.
func TestRestartsFromDatabasePosition(t *testing.T) {
	e := newEnv(t, withPartitions(2))
	e.dumpLogsOnFailure(t)
	ctx := context.Background()
	ids := produceIDs(t, e, 40)
	a := e.start(e.config(func(c *consumer.Config) { c.BatchSize = 5 }), nil)
	e.waitCaughtUp(t, 30*time.Second)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	// What a failover to a standby that had only the first 10 records of
	// each partition leaves.
	if _, err := e.pool.Exec(ctx, `
WITH gone AS (DELETE FROM effect WHERE off >= 10 RETURNING event_id)
DELETE FROM processed_event WHERE event_id IN (SELECT event_id FROM gone)`); err != nil {
		t.Fatal(err)
	}
	tag, err := e.pool.Exec(ctx, `UPDATE processed_event_offsets SET next_offset = 10 WHERE consumer_group = $1 AND topic = $2`, e.group, e.topic)
	if err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("setting the positions back: %v (%d rows)", err, tag.RowsAffected())
	}

	b := e.start(e.config(), nil)
	waitFor(t, 30*time.Second, "the lost records to take effect again", func() (bool, string) {
		n := e.effectsOf(t, ids)
		return n == len(ids), fmt.Sprintf("%d of %d", n, len(ids))
	})
	rows, distinct := e.effects(t)
	if rows != len(ids) || distinct != len(ids) {
		t.Fatalf("%d effect rows, %d distinct; want %d", rows, distinct, len(ids))
	}
	if n := metricValue(t, scrape(t, b.c), "idempotent_consumer_position_rewinds_total"); n != 2 {
		t.Fatalf("position_rewinds_total = %d, want 2", n)
	}
}

// TestIdlePartitionRewinds: a partition that gets no more records still
// notices, within positionCheckInterval (10s), that the database lost its
// last batches (its position behind, or its row gone with everything since
// the assignment), and redoes them.
func TestIdlePartitionRewinds(t *testing.T) {
	for _, tc := range []struct{ name, lose string }{
		{"position behind", `UPDATE processed_event_offsets SET next_offset = 10`},
		{"row gone", `DELETE FROM processed_event_offsets`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withPartitions(2))
			e.dumpLogsOnFailure(t)
			ctx := context.Background()
			ids := produceIDs(t, e, 40)
			r := e.start(e.config(func(c *consumer.Config) { c.BatchSize = 5 }), nil)
			e.waitCaughtUp(t, 30*time.Second)
			if _, err := e.pool.Exec(ctx, `
WITH gone AS (DELETE FROM effect WHERE off >= 10 RETURNING event_id)
DELETE FROM processed_event WHERE event_id IN (SELECT event_id FROM gone)`); err != nil {
				t.Fatal(err)
			}
			if _, err := e.pool.Exec(ctx, tc.lose); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "the idle partitions to redo the lost records", func() (bool, string) {
				n := e.effectsOf(t, ids)
				return n == len(ids), fmt.Sprintf("%d of %d", n, len(ids))
			})
			if rows, distinct := e.effects(t); rows != len(ids) || distinct != len(ids) {
				t.Fatalf("%d effect rows, %d distinct; want %d", rows, distinct, len(ids))
			}
			if n := metricValue(t, scrape(t, r.c), "idempotent_consumer_position_rewinds_total"); n != 2 {
				t.Fatalf("position_rewinds_total = %d, want 2", n)
			}
		})
	}
}
