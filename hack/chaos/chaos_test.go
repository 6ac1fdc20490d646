package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestChaosShort is the short chaos variant in `make test`: separate consumer
// processes killed with SIGKILL, rebalances, a PostgreSQL crash-restart and a
// broker restart while events stream in; then every invariant is checked. A
// second group of consumer processes runs the http sink (an external handler)
// against a provider that drops some connections after applying the request,
// and a third group of claim clients (hack/chaos/claimclient: the claim
// function as docs/any-language.md tells another language to call it) is
// killed with SIGKILL too, every other time between its database commit and
// its offset commit.
// Then the dead letters of the run's ledger "bug" are replayed by `consumer
// replay` processes killed with kill -9 three times (replay.go).
func TestChaosShort(t *testing.T) {
	runChaosShort(t, ShortOptions())
}

// TestChaosShortThroughPgBouncer is the same run with both consumer groups
// going through a real PgBouncer in transaction pooling mode
// (CONSUMER_DATABASE_POOLER=transaction), and the claim clients too (pgx in
// QueryExecModeExec), PostgreSQL restarted behind it.
func TestChaosShortThroughPgBouncer(t *testing.T) {
	if _, err := exec.LookPath("pgbouncer"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("pgbouncer is not installed (Debian package pgbouncer; .ci/run installs it)")
		}
		t.Skip("pgbouncer is not installed")
	}
	o := ShortOptions()
	o.Pooler = true
	o.Events = 8_000
	runChaosShort(t, o)
}

func runChaosShort(t *testing.T, o Options) {
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode")
	}
	o.Seed = uint64(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute+30*time.Second)
	defer cancel()
	var log strings.Builder
	res, err := Run(ctx, o, &log)
	if res != nil {
		res.Print(&log)
	}
	t.Log(log.String())
	if err != nil {
		t.Fatalf("chaos run (seed %d): %v", o.Seed, err)
	}
	if v := res.Violations(); len(v) > 0 {
		t.Fatalf("chaos (seed %d) found violations:\n%s", o.Seed, strings.Join(v, "\n"))
	}
	if res.Kills < o.Kills || res.PostgresRestarts < 1 || res.BrokerRestarts < 1 {
		t.Fatalf("the chaos did not happen: kills=%d pg=%d broker=%d", res.Kills, res.PostgresRestarts, res.BrokerRestarts)
	}
	if res.HTTPKills < o.HTTPKills || res.ProviderDrops == 0 {
		t.Fatalf("the HTTP group's chaos did not happen: kills=%d, connections dropped after applying=%d", res.HTTPKills, res.ProviderDrops)
	}
	if res.ClaimKills < o.ClaimKills || res.ClaimKillsAfterCommit == 0 {
		t.Fatalf("the claim group's chaos did not happen: kills=%d, between a database commit and its offset commit=%d", res.ClaimKills, res.ClaimKillsAfterCommit)
	}
	if res.TxnCommitted == 0 || res.TxnAborted == 0 || res.AbortedMessages == 0 {
		t.Fatalf("the transactional producer committed %d and aborted %d transactions, %d aborted records in the topic: nothing to check",
			res.TxnCommitted, res.TxnAborted, res.AbortedMessages)
	}
	if o.BugBuckets > 0 && (res.Replay == nil || res.Replay.Kills < o.ReplayKills || res.Replay.Apply.Applied == 0 || res.Replay.Apply.Parked == 0) {
		t.Fatalf("the replay phase did not happen: %+v", res.Replay)
	}
	if res.DuplicateMessages*5 < res.Messages {
		t.Fatalf("duplicates %d of %d messages: less than the 20%% the test is meant to have", res.DuplicateMessages, res.Messages)
	}
}

// TestOutboxChaosShort is the outbox chain in `make test` (outbox.go):
// producer services writing orders and their outbox events in one
// transaction (some rolled back on purpose) are killed with SIGKILL, two
// `consumer outbox-relay` replicas are killed ten times (every other time the
// owner of the stream), PostgreSQL and the broker restart once, and the
// consumers of the outbox topic are killed too; no event of a transaction
// that did not commit is published, every committed one is, first in key
// order, and applied once.
func TestOutboxChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode")
	}
	o := OutboxShortOptions()
	o.Seed = uint64(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var log strings.Builder
	res, err := RunOutbox(ctx, o, &log)
	if res != nil {
		res.Print(&log)
	}
	t.Log(log.String())
	if err != nil {
		t.Fatalf("outbox chaos run (seed %d): %v", o.Seed, err)
	}
	if v := res.Violations(); len(v) > 0 {
		t.Fatalf("outbox chaos (seed %d) found violations:\n%s", o.Seed, strings.Join(v, "\n"))
	}
	if res.RelayKills < 10 || res.Relays < 2 || res.ProducerKills < o.OutboxProducerKills || res.PostgresRestarts != 1 || res.BrokerRestarts != 1 {
		t.Fatalf("the chaos did not happen: relays=%d relay kills=%d producer kills=%d pg=%d broker=%d",
			res.Relays, res.RelayKills, res.ProducerKills, res.PostgresRestarts, res.BrokerRestarts)
	}
	if res.RelayOwnerKills == 0 || res.RolledBack == 0 || res.Committed < 200 {
		t.Fatalf("nothing much to check: %d kills of the owner, %d orders rolled back, %d committed", res.RelayOwnerKills, res.RolledBack, res.Committed)
	}
}
