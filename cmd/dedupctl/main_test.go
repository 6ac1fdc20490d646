package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

// v7At is a UUID v7 stamped at t.
func v7At(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	ms := uint64(at.UnixMilli())
	for i := 0; i < 6; i++ {
		id[i] = byte(ms >> (40 - 8*i))
	}
	return id
}

// TestDedupctl drives the command on a bare database, as a role that is
// neither superuser nor owner of anything (with CREATE on the database) and
// whose URL carries a password: create makes a table that takes claims at
// once, maintain advances the window, show reports it, grant gives a
// consumer's role its rows, a table of another owner is refused, and no
// output carries the password.
func TestDedupctl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := consumertest.DatabaseURL(t)
	owner := consumertest.NewRole(t, admin, "dedupctl_owner")
	consumerRole := consumertest.NewRole(t, admin, "dedupctl_consumer")
	adminPool, err := pgxpool.New(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer adminPool.Close()
	if _, err := adminPool.Exec(ctx, "DO $$BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO "+owner.Name+"', current_database()); END$$"); err != nil {
		t.Fatal(err)
	}
	password, _ := mustURLPassword(t, owner.URL)

	urlFile := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(urlFile, []byte(owner.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	run := func(env map[string]string, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut strings.Builder
		code := Main(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
		all.WriteString(out.String() + errOut.String())
		return code, out.String(), errOut.String()
	}
	env := map[string]string{"DATABASE_URL": owner.URL}

	// No URL: refused before anything runs.
	if code, _, errOut := run(nil, "create"); code != 2 || !strings.Contains(errOut, "DATABASE_URL") {
		t.Fatalf("create without a URL: exit %d, %q; want 2 naming DATABASE_URL", code, errOut)
	}

	// create: table, first partitions, claim functions; usable at once.
	code, out, errOut := run(env, "create", "--schema", "billing", "--retention", "48h", "--premake", "2")
	if code != 0 {
		t.Fatalf("create: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "billing.processed_event_claim(uuid[], text)") || !strings.Contains(out, "without it the window closes at") {
		t.Errorf("create's output names no claim function or no closing time:\n%s", out)
	}
	pool, err := pgxpool.New(ctx, owner.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var verdict string
	if err := pool.QueryRow(ctx, `SELECT billing.processed_event_claim_one($1, 'g')`, v7At(t, time.Now())).Scan(&verdict); err != nil || verdict != dedup.VerdictNew {
		t.Fatalf("claim_one right after create: %q, %v; want new", verdict, err)
	}

	show := func(args ...string) Show {
		t.Helper()
		code, out, errOut := run(env, append([]string{"show", "--schema", "billing", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("show: exit %d\n%s\n%s", code, out, errOut)
		}
		var s Show
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("show --json: %v\n%s", err, out)
		}
		return s
	}
	before := show()
	if before.Owner != DefaultOwner || before.Interval != dedup.Daily || len(before.Partitions) < 5 || !before.To.After(time.Now().Add(2*24*time.Hour)) {
		t.Fatalf("show after create: %+v; want owner %s, Daily, 2 days back and 2 ahead", before, DefaultOwner)
	}
	if len(before.Functions) != 2 {
		t.Errorf("show lists functions %v, want the two claim functions", before.Functions)
	}

	// maintain, three days on: the window moves forward, old partitions go.
	later := time.Now().Add(72 * time.Hour).UTC().Format(time.RFC3339)
	code, out, errOut = run(env, "maintain", "--schema", "billing", "--retention", "48h", "--premake", "2", "--now", later)
	if code != 0 {
		t.Fatalf("maintain: exit %d\n%s\n%s", code, out, errOut)
	}
	after := show()
	if after.To.Sub(before.To) != 72*time.Hour || !after.From.After(before.From) {
		t.Fatalf("maintain 3 days later: window [%s, %s) -> [%s, %s); want both ends 3 days on", before.From, before.To, after.From, after.To)
	}
	t.Logf("maintain advanced the window [%s, %s) -> [%s, %s)", before.From.Format(time.RFC3339), before.To.Format(time.RFC3339), after.From.Format(time.RFC3339), after.To.Format(time.RFC3339))
	// The text form says when the window closes.
	if code, out, _ := run(env, "show", "--schema", "billing"); code != 0 || !strings.Contains(out, "unless maintenance runs") {
		t.Errorf("show: exit %d\n%s", code, out)
	}

	// grant, with the URL from a file: the consumer's role claims for its group only.
	fileEnv := map[string]string{"DATABASE_URL_FILE": urlFile}
	code, out, errOut = run(fileEnv, "grant", "--schema", "billing", "--role", consumerRole.Name, "--group", "g")
	if code != 0 || !strings.Contains(out, "GRANT") {
		t.Fatalf("grant: exit %d\n%s\n%s", code, out, errOut)
	}
	cpool, err := pgxpool.New(ctx, consumerRole.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer cpool.Close()
	// (The window starts three days on now.)
	if err := cpool.QueryRow(ctx, `SELECT billing.processed_event_claim_one($1, 'g')`, v7At(t, time.Now().Add(72*time.Hour))).Scan(&verdict); err != nil || verdict != dedup.VerdictNew {
		t.Fatalf("the granted role's claim: %q, %v; want new", verdict, err)
	}
	if _, err := cpool.Exec(ctx, `SELECT billing.processed_event_claim_one($1, 'other')`, v7At(t, time.Now().Add(72*time.Hour))); err == nil {
		t.Error("the granted role claimed for another group; row-level security should refuse it")
	}
	roles := show().Roles
	if len(roles) != 1 || roles[0].Role != consumerRole.Name || strings.Join(roles[0].Groups, ",") != "g" {
		t.Errorf("show lists roles %+v; want %s for group g", roles, consumerRole.Name)
	}
	if code, out, _ := run(fileEnv, "grant", "--schema", "billing", "--role", consumerRole.Name, "--group", "g"); code != 0 || !strings.Contains(out, "already has") {
		t.Errorf("grant again: exit %d\n%s", code, out)
	}

	// A table with another owner's marker (the operator's) is refused.
	eng, err := dedup.NewEngine(adminPool, dedup.Table{Schema: "operated"})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(ctx, "0b7e-some-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(ctx, "GRANT USAGE ON SCHEMA operated TO "+pgx.Identifier{owner.Name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(map[string]string{"DATABASE_URL": admin}, "maintain", "--schema", "operated"); code != 1 || !strings.Contains(errOut, "0b7e-some-uid") {
		t.Errorf("maintain of the operator's table: exit %d, %q; want 1 naming its owner", code, errOut)
	}

	// A failing connection: the error does not quote the password.
	bad := strings.Replace(owner.URL, "@", "@127.0.0.1:1/x?connect_timeout=1&host=", 1)
	if code, _, _ := run(map[string]string{"DATABASE_URL": bad}, "show"); code == 0 {
		t.Error("show with an unreachable server succeeded")
	}
	if strings.Contains(all.String(), password) {
		t.Errorf("the password reached dedupctl's output:\n%s", all.String())
	}
}

func mustURLPassword(t *testing.T, u string) (string, string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(u)
	if err != nil || cfg.Password == "" {
		t.Fatalf("the role's URL has no password (%v)", err)
	}
	return cfg.Password, cfg.User
}
