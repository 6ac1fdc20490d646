package consumer_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestRebalance: consumers join and leave the group while events (with
// duplicates) stream in; at the end every unique id has exactly one effect.
func TestRebalance(t *testing.T) {
	e := newEnv(t, withPartitions(6))
	e.dumpLogsOnFailure(t)
	const rounds, perRound = 60, 50
	var unique sync.Map
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		w := e.kafka.Writer(e.topic)
		defer w.Close()
		rng := rand.New(rand.NewPCG(7, 7))
		var seen []uuid.UUID
		for range rounds {
			var msgs []kafka.Message
			for range perRound {
				var id uuid.UUID
				if len(seen) > 0 && rng.IntN(5) == 0 { // 20% duplicates
					id = seen[rng.IntN(len(seen))]
				} else {
					id, _ = uuid.NewV7()
					seen = append(seen, id)
					unique.Store(id, true)
				}
				msgs = append(msgs, event(id, rng.IntN(6), ""))
			}
			if err := w.WriteMessages(context.Background(), msgs...); err != nil {
				t.Errorf("producing: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	cfg := e.config(func(c *consumer.Config) { c.BatchSize = 25 })
	a := e.start(cfg, nil)
	time.Sleep(800 * time.Millisecond)
	b := e.start(cfg, nil)
	time.Sleep(800 * time.Millisecond)
	c := e.start(cfg, nil)
	time.Sleep(800 * time.Millisecond)
	if err := a.stop(t); err != nil { // leaves mid-stream
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond)
	// b "crashes" between a database commit and its offset commit.
	crash := errors.New("crash")
	var once sync.Once
	d := e.start(cfg, nil, func(c *consumer.Consumer) {
		consumer.SetAfterDBCommitHook(c, func(int, int64) error {
			var err error
			once.Do(func() { err = crash })
			return err
		})
	})
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := d.wait(t, 30*time.Second); !errors.Is(err, crash) {
		t.Fatalf("d returned %v, want its crash", err)
	}
	f := e.start(cfg, nil)

	<-produced
	e.waitCaughtUp(t, 90*time.Second)
	var want int
	unique.Range(func(any, any) bool { want++; return true })
	rows, distinct := e.effects(t)
	if rows != want || distinct != want {
		t.Fatalf("%d effect rows, %d distinct ids; want %d", rows, distinct, want)
	}
	var dups int
	for _, r := range []*running{c, f} {
		dups += metricValue(t, scrape(t, r.c), "idempotent_consumer_duplicates_skipped_total")
	}
	t.Logf("%d unique events, %d records; duplicates skipped by the last two consumers: %d", want, rounds*perRound, dups)
	// A fifth of the records are duplicates and the last two consumers take
	// the stream's tail: they must have met, and skipped, some. None means
	// the dedup check was bypassed and the effect count held by chance.
	if dups == 0 {
		t.Fatalf("the last two consumers skipped no duplicate among %d records with ~20%% duplicates", rounds*perRound)
	}
}

func metricValue(t testing.TB, body, name string) int {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? ([0-9.e+]+)$`)
	total := 0
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		f, _ := strconv.ParseFloat(m[1], 64)
		total += int(f)
	}
	return total
}
