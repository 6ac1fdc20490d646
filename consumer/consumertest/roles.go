package consumertest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Role is a login role made for one test, and a URL that connects as it.
type Role struct {
	Name string
	URL  string // databaseURL with this role's name and password
}

// NewRole creates a login role (neither superuser nor owner of anything) on
// the server of databaseURL, a URL from DatabaseURL, and returns it with a
// URL to that database as the role; attrs are extra role options, e.g.
// "CREATEDB". Roles belong to the whole cluster, so the name is unique and
// the role is dropped, with what it owns in that database, when the test
// ends. Call it after DatabaseURL, so that this cleanup runs before the
// database's.
func NewRole(tb testing.TB, databaseURL, prefix string, attrs ...string) Role {
	tb.Helper()
	name := prefix + "_" + randomHex(4)
	password := randomHex(16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		tb.Fatalf("consumertest: connecting to PostgreSQL: %v", err)
	}
	defer admin.Close(context.Background())
	sql := "CREATE ROLE " + pgx.Identifier{name}.Sanitize() + " LOGIN PASSWORD '" + password + "'"
	for _, a := range attrs {
		sql += " " + a
	}
	if _, err := admin.Exec(ctx, sql); err != nil {
		tb.Fatalf("consumertest: creating role %s: %v", name, redact(err, password))
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return // the server may have been stopped by the test; RunMain removes it
		}
		defer admin.Close(context.Background())
		id := pgx.Identifier{name}.Sanitize()
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+id)
		_, _ = admin.Exec(ctx, "DROP ROLE "+id)
	})
	u, err := url.Parse(databaseURL)
	if err != nil {
		tb.Fatalf("consumertest: parsing the database URL: %v", redact(err, password))
	}
	u.User = url.UserPassword(name, password)
	return Role{Name: name, URL: u.String()}
}
