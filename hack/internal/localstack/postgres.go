package localstack

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

// StartPostgres starts a throwaway PostgreSQL server (cl stops it), creates
// database db and runs each of ddl in it. It returns the server (for its
// password, and for a crash-restart) and the database's URL.
func StartPostgres(ctx context.Context, cl *proc.Cleanup, db string, ddl []string, opts ...consumertest.PostgresOption) (*consumertest.Postgres, string, error) {
	pg, err := consumertest.StartPostgres(opts...)
	if err != nil {
		return nil, "", fmt.Errorf("starting PostgreSQL: %w", err)
	}
	cl.Add(func() { _ = pg.Stop() })
	if err := ExecSQL(ctx, pg.URL("postgres"), "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return nil, "", err
	}
	url := pg.URL(db)
	for _, sql := range ddl {
		if err := ExecSQL(ctx, url, sql); err != nil {
			return nil, "", err
		}
	}
	return pg, url, nil
}

// ExecSQL runs one statement on its own connection.
func ExecSQL(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("running %q: %w", firstLine(sql), err)
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
