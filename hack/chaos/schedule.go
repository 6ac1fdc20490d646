package main

import (
	"cmp"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/hack/internal/localstack"
)

// action is one step of the chaos schedule, at an offset from the start of
// production.
type action struct {
	at   time.Duration
	kind string // kill, kill-http, kill-claim, pg, broker
}

// plan spreads the kills evenly (each at a random moment of its slice of
// the production period) and puts the PostgreSQL and broker restarts in its
// middle; it returns the actions in time order.
func (h *harness) plan() []action {
	o := h.o
	var plan []action
	for i := range o.Kills {
		plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (float64(i) + h.rng.Float64()) / float64(o.Kills)), "kill"})
	}
	if h.httpConsumers != nil {
		for i := range o.HTTPKills {
			plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (float64(i) + h.rng.Float64()) / float64(o.HTTPKills)), "kill-http"})
		}
	}
	if h.claimClients != nil {
		for i := range o.ClaimKills {
			plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (float64(i) + h.rng.Float64()) / float64(o.ClaimKills)), "kill-claim"})
		}
	}
	for i := range o.PostgresRestarts {
		plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (0.3 + 0.4*float64(i)/float64(max(1, o.PostgresRestarts)))), "pg"})
	}
	for i := range o.BrokerRestarts {
		plan = append(plan, action{time.Duration(float64(o.ProduceFor) * (0.55 + 0.3*float64(i)/float64(max(1, o.BrokerRestarts)))), "broker"})
	}
	slices.SortStableFunc(plan, func(a, b action) int { return cmp.Compare(a.at, b.at) })
	return plan
}

// schedule is the chaos schedule running beside production; err is valid
// once done is closed.
type schedule struct {
	done chan struct{}
	err  error
}

// startSchedule plans the chaos and carries it out in the background.
func (h *harness) startSchedule(ctx context.Context) *schedule {
	plan := h.plan()
	s := &schedule{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t0 := time.Now()
		for _, a := range plan {
			if !localstack.Sleep(ctx, time.Until(t0.Add(a.at))) {
				return
			}
			if s.err = h.act(ctx, a.kind); s.err != nil {
				return
			}
		}
	}()
	return s
}

// act carries out one action of the schedule.
func (h *harness) act(ctx context.Context, kind string) error {
	res := h.res
	switch kind {
	case "kill":
		// Half the kills wait (up to 2s) to land right after a database commit (the
		// ledger grew a moment ago), when the offset commit is most
		// likely still in flight: the window the design must cover.
		when := "at a random moment"
		if h.rng.IntN(2) == 0 && waitForLedgerCommit(ctx, h.pool, 2*time.Second) {
			when = "right after a database commit"
			res.KillsAfterCommit++
		}
		victim, err := killAndReplace(h.consumers, h.o.Consumers, h.rng)
		if err != nil {
			return err
		}
		res.Kills++
		h.step("kill -9 %s %s; %d consumers running", victim, when, h.consumers.alive())
	case "kill-http":
		victim, err := killAndReplace(h.httpConsumers, h.o.HTTPConsumers, h.rng)
		if err != nil {
			return err
		}
		res.HTTPKills++
		h.step("kill -9 %s; %d HTTP consumers running", victim, h.httpConsumers.alive())
	case "kill-claim":
		// Every other kill (the first among them, and each until one has)
		// lands between a claim client's database commit and its offset
		// commit: the client that takes the stall file waits there for the
		// kill.
		when := "at a random moment"
		var victim string
		if res.ClaimKills%2 == 0 || res.ClaimKillsAfterCommit == 0 {
			if pid, ok := h.takeStall(ctx, 3*time.Second); ok {
				if victim = h.claimClients.killPid(pid); victim != "" {
					when = "between its database commit and its offset commit"
					res.ClaimKillsAfterCommit++
				}
			}
		}
		if victim == "" {
			victim = h.claimClients.killRandom(h.rng)
		}
		if err := h.claimClients.fillTo(h.o.ClaimClients); err != nil {
			return err
		}
		res.ClaimKills++
		h.step("kill -9 %s %s; %d claim clients running", victim, when, h.claimClients.alive())
	case "pg":
		h.step("PostgreSQL: crash (SIGKILL) and restart")
		_ = h.pg.Kill()
		localstack.Sleep(ctx, time.Second)
		if err := h.pg.Start(); err != nil {
			return fmt.Errorf("restarting PostgreSQL: %w", err)
		}
		res.PostgresRestarts++
	case "broker":
		h.step("broker: kill -9 and restart from its data dir")
		if err := h.broker.Restart(ctx, time.Second); err != nil {
			return err
		}
		res.BrokerRestarts++
	}
	return nil
}

// waitForLedgerCommit polls the ledger until a new row is visible (that is,
// committed), or the timeout passes.
func waitForLedgerCommit(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) bool {
	var before int64
	if err := pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM ledger").Scan(&before); err != nil {
		return false
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var now int64
		if err := pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM ledger").Scan(&now); err != nil {
			return false
		}
		if now != before {
			return true
		}
		if !localstack.Sleep(ctx, 2*time.Millisecond) {
			return false
		}
	}
	return false
}

// takeStall offers the claim clients the stall file and waits for one to take
// it (rename it to FILE.<pid>, after a database commit, before its offset
// commit); it returns that client's pid. The offer is withdrawn on timeout.
func (h *harness) takeStall(ctx context.Context, timeout time.Duration) (int, bool) {
	stale, _ := filepath.Glob(h.stallFile + ".*") // taken after an earlier offer was withdrawn
	for _, f := range stale {
		_ = os.Remove(f)
	}
	if err := os.WriteFile(h.stallFile, nil, 0o600); err != nil {
		return 0, false
	}
	defer os.Remove(h.stallFile)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if taken, _ := filepath.Glob(h.stallFile + ".*"); len(taken) > 0 {
			for _, f := range taken {
				_ = os.Remove(f)
			}
			pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(taken[0]), "."))
			return pid, err == nil
		}
		if !localstack.Sleep(ctx, 5*time.Millisecond) {
			break
		}
	}
	return 0, false
}

// killAndReplace kill -9s one of f's consumers and replaces it, now and then
// with one more or one fewer than usual: every change is a rebalance.
func killAndReplace(f *fleet, usual int, rng *mrand.Rand) (string, error) {
	victim := f.killRandom(rng)
	n := 1
	switch {
	case f.alive() < usual:
		n = usual - f.alive()
	case rng.IntN(4) == 0:
		n = 0
	}
	if f.alive()+n == 0 {
		n = 1
	}
	return victim, f.startN(n)
}
