package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// TestFailover (issue 12, defect 8; acceptance 3): a PostgreSQL failover to
// an asynchronous standby that lags, mid-stream. The standby stops receiving
// WAL (as behind a network partition) while the consumer keeps committing
// batches, and their offsets, on the primary; the primary crashes and the
// standby is promoted, losing those commits. The consumer, on a multi-host
// URL with target_session_attrs=read-write, must redo them from Kafka: every
// event takes effect exactly once on the new primary.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := consumertest.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	e := newEnv(t, withPartitions(4))
	e.dumpLogsOnFailure(t)
	ppool, err := pgxpool.New(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	createTables(t, ppool, e.table)
	ppool.Close()
	standby, err := primary.StartStandby()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	spool := newPoolFor(t, standby.URL("postgres"))
	count := func(pool *pgxpool.Pool) (rows, distinct int, err error) {
		err = pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM effect`).Scan(&rows, &distinct)
		return rows, distinct, err
	}

	e.dsn = consumertest.MultiHostURL("postgres", primary, standby)
	cfg := e.config(func(c *consumer.Config) {
		c.BatchSize = 50
		c.DatabaseURL = e.dsn
	})
	r := e.start(cfg, nil)

	// A steady stream: 250 events every 50ms for about 8s.
	const rounds, perRound = 160, 25
	var (
		unique   sync.Map
		produced atomic.Int64
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := e.kafka.Writer(e.topic)
		defer w.Close()
		for i := range rounds {
			msgs := make([]kafka.Message, perRound)
			for j := range msgs {
				id, _ := uuid.NewV7()
				unique.Store(id, true)
				msgs[j] = event(id, (i*perRound+j)%e.parts, "")
			}
			if err := w.WriteMessages(context.Background(), msgs...); err != nil {
				t.Errorf("producing: %v", err)
				return
			}
			produced.Add(perRound)
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// Let a third of the stream take effect and reach the standby, then
	// cut the standby off and let the primary commit on its own.
	waitFor(t, 60*time.Second, "a third of the stream to take effect on the standby", func() (bool, string) {
		rows, _, err := count(spool)
		return err == nil && rows >= rounds*perRound/3, fmt.Sprintf("%d rows, err %v", rows, err)
	})
	if err := standby.DetachStandby(ctx); err != nil {
		t.Fatal(err)
	}
	atDetach, _, err := count(spool)
	if err != nil {
		t.Fatal(err)
	}
	pconn := newPoolFor(t, primary.URL("postgres"))
	var onPrimary int
	waitFor(t, 30*time.Second, "the primary to commit what the standby does not have", func() (bool, string) {
		onPrimary, _, err = count(pconn)
		return err == nil && onPrimary >= atDetach+300, fmt.Sprintf("%d rows on the primary, %d on the standby, err %v", onPrimary, atDetach, err)
	})
	lagged, err := consumertest.CommittedOffsets(ctx, e.kafka.Brokers(), e.group, e.topic, e.parts)
	if err != nil {
		t.Fatal(err)
	}
	pconn.Close()
	// The crash: whatever the primary committed since the detach is gone
	// with it, though the offsets of most of it are committed to Kafka.
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	atRisk := onPrimary - atDetach
	t.Logf("failover: %d effects on the standby at the detach, %d on the primary before its crash (%d lost with it); Kafka committed offsets then: %v",
		atDetach, onPrimary, atRisk, lagged)

	<-done
	e.pool = spool // the new primary
	e.waitCaughtUp(t, 90*time.Second)
	// A partition whose last batch the failover lost and that got no
	// record since would show it only after its idle check; the stream
	// kept every partition busy, so this is final.
	var want int
	unique.Range(func(any, any) bool { want++; return true })
	rows, distinct, err := count(spool)
	if err != nil {
		t.Fatal(err)
	}
	lost := want - distinct
	dups := rows - distinct
	rewinds := metricValue(t, scrape(t, r.c), "idempotent_consumer_position_rewinds_total")
	res := fmt.Sprintf("RESULT failover events=%d lost_with_old_primary=%d failover_lost=%d duplicates_applied=%d rewinds=%d",
		want, atRisk, lost, dups, rewinds)
	t.Log(res)
	fmt.Println(res)
	// The asynchronous standby was reported at start-up.
	if n := metricValue(t, scrape(t, r.c), `idempotent_consumer_database_durability_risk{reason="AsynchronousStandby"}`); n != 1 {
		t.Errorf("database_durability_risk{reason=AsynchronousStandby} = %d, want 1", n)
	}
	if !strings.Contains(e.logBuf.String(), "reason=AsynchronousStandby") {
		t.Error("no log record reporting the asynchronous standby")
	}
	if atRisk <= 0 {
		t.Fatalf("the failover lost no commits (%d on the standby, %d on the primary): the test did not test anything", atDetach, onPrimary)
	}
	if lost != 0 || dups != 0 {
		t.Fatalf("%d of %d events never took effect, %d took effect twice", lost, want, dups)
	}
}
