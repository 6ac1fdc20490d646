package consumertest

// The test binary's shared cluster and the fresh database each test gets
// from it (postgres.go runs a cluster; this file hands out databases).

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The shared cluster: one per test binary, started on first use.
var shared struct {
	once    sync.Once
	pg      *Postgres
	baseURL string
	err     error
	dbSeq   int
	mu      sync.Mutex
}

// SharedPostgres returns the test binary's cluster, starting it on first use,
// or nil when TEST_DATABASE_URL points at an external server. Call RunMain from
// TestMain so that it is stopped and removed when the tests end.
func SharedPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	sharedStart()
	if shared.err != nil {
		tb.Fatalf("consumertest: %v", shared.err)
	}
	return shared.pg
}

func sharedStart() {
	shared.once.Do(func() {
		if u := os.Getenv(EnvDatabaseURL); u != "" {
			shared.baseURL = u
			return
		}
		shared.pg, shared.err = StartPostgres()
		if shared.err == nil {
			shared.baseURL = shared.pg.URL("postgres")
		}
	})
}

// RunMain runs the tests of a package that uses the PostgreSQL harness and then
// stops the shared cluster; call it from TestMain: func TestMain(m *testing.M) { consumertest.RunMain(m) }.
func RunMain(m *testing.M) {
	code := m.Run()
	if shared.pg != nil {
		_ = shared.pg.Stop()
	}
	os.Exit(code)
}

// DatabaseURL creates a fresh, empty database for the test and returns its
// connection URL. The database is dropped when the test ends.
func DatabaseURL(tb testing.TB) string {
	tb.Helper()
	sharedStart()
	if shared.err != nil {
		tb.Fatalf("consumertest: %v", shared.err)
	}
	shared.mu.Lock()
	shared.dbSeq++
	name := fmt.Sprintf("t%d_%s", shared.dbSeq, randomHex(4))
	shared.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, shared.baseURL)
	if err != nil {
		tb.Fatalf("consumertest: connecting to PostgreSQL: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("consumertest: creating database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, shared.baseURL)
		if err != nil {
			return // the server may have been stopped by the test; RunMain removes it
		}
		defer admin.Close(context.Background())
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	cfg, err := pgx.ParseConfig(shared.baseURL)
	if err != nil {
		tb.Fatalf("consumertest: %v", err)
	}
	u, err := url.Parse(shared.baseURL)
	if err != nil {
		tb.Fatalf("consumertest: parsing %s: %v", EnvDatabaseURL, redact(err, cfg.Password))
	}
	u.Path = "/" + name
	return u.String()
}

// NewPool creates a fresh database for the test and returns a pool connected
// to it, closed when the test ends.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	dsn := DatabaseURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		tb.Fatalf("consumertest: connecting: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

func redact(err error, secret string) error {
	if secret == "" {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "xxxxx"))
}
