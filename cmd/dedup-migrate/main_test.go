package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

// TestCommand drives the binary's Main: a dry run, the migration, a re-run,
// and the argument errors.
func TestCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := consumertest.DatabaseURL(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	v7, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO processed_event (event_id) VALUES ($1), ($2)`, v7, uuid.New()); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := Main(ctx, args, env, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	csvPath := filepath.Join(t.TempDir(), "skipped.csv")
	args := []string{"--owner", "0b7e-uid", "--group", "orders", "--retention", "48h", "--skipped-csv", csvPath}

	code, out, errOut := run(append(args, "--dry-run")...)
	if code != 0 || !strings.Contains(out, "dry run: nothing was changed") || !strings.Contains(out, "inside the window: 1 ") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(csvPath); !os.IsNotExist(err) {
		t.Errorf("the dry run wrote --skipped-csv (stat: %v); a dry run writes nothing", err)
	}
	code, out, errOut = run(args...)
	if code != 0 || !strings.Contains(out, "copied now 1,") || !strings.Contains(out, "not_uuid_v7: 1") {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("output of the run:\n%s", out)
	if b, err := os.ReadFile(csvPath); err != nil || !strings.Contains(string(b), "not_uuid_v7") {
		t.Errorf("skipped CSV: %v %q", err, b)
	}
	code, out, errOut = run(args...)
	if code != 0 || !strings.Contains(out, "copied now 0, present already 1") {
		t.Fatalf("re-run: exit %d\n%s\n%s", code, out, errOut)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = $1 AND consumer_group = 'orders'`, v7).Scan(&n); err != nil || n != 1 {
		t.Errorf("migrated row: %d, %v", n, err)
	}

	if code, _, errOut := run("--bogus"); code != 2 || !strings.Contains(errOut, "bogus") {
		t.Errorf("unknown flag: exit %d %q", code, errOut)
	}
	// Invalid arguments and combinations exit 2, as documented.
	for _, bad := range [][]string{
		{"--scope", "Everything"},
		{"--group", "orders", "--sync-trigger"}, // in place: the legacy table must keep its name
		{"--group", "orders", "--legacy-table", "old_events", "--rename-to", "x"},
		{"--group", "orders", "--batch-size", "-1"},
		{"--remove-sync-trigger", "--sync-trigger"},
		{"--remove-sync-trigger", "--dry-run"},
	} {
		if code, _, errOut := run(bad...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d %q, want 2 with a message", bad, code, errOut)
		}
	}
	var noEnv strings.Builder
	if code := Main(ctx, nil, func(string) string { return "" }, &noEnv, &noEnv); code != 2 || !strings.Contains(noEnv.String(), "DATABASE_URL") {
		t.Errorf("no URL: exit %d %q", code, noEnv.String())
	}
	// A URL that does not parse is refused without echoing it (it may hold a password).
	var bad strings.Builder
	if code := Main(ctx, []string{"--database-url", "postgres://u:s3cret@[::1"}, env, &bad, &bad); code != 2 || strings.Contains(bad.String(), "s3cret") {
		t.Errorf("bad URL: exit %d %q", code, bad.String())
	}
}
