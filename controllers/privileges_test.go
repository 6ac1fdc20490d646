/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestDocumentedPrivileges: each of the grants docs/database-secrets.md
// gives (A: a schema owned by the role, B: USAGE and CREATE on a schema, C:
// the same on public) is enough for everything the operator and the
// consumer do to the table, run as that role; without them a role that does
// not own the database cannot create the table in public (PostgreSQL 15's
// change), and the condition says PermissionDenied.
func TestDocumentedPrivileges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adminURL := consumertest.DatabaseURL(t)
	admin := pgConn(t, adminURL)
	role := "orders_" + randSuffix()
	password := "pw-" + randSuffix()
	mustExec := func(sql string) {
		t.Helper()
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	mustExec("CREATE ROLE " + role + " LOGIN PASSWORD '" + password + "'")
	t.Cleanup(func() {
		c := context.Background()
		_, _ = admin.Exec(c, "DROP OWNED BY "+role)
		_, _ = admin.Exec(c, "DROP ROLE "+role)
	})
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	roleURL := u.String()
	cache := NewPoolCache(PoolOptions{})
	defer cache.Close()
	uid := "uid-" + randSuffix()
	now := time.Now()

	lifecycle := func(schema string) error {
		tbl := dedup.Table{Schema: schema, Name: "processed_event"}.WithDefaults()
		store, err := cache.Open(ctx, DatabaseConn{URL: roleURL}, tbl)
		if err != nil {
			return err
		}
		if err := store.EnsureTable(ctx, uid); err != nil {
			return err
		}
		if _, err := store.Maintain(ctx, now, 2, 48*time.Hour); err != nil {
			return err
		}
		if _, err := store.Observe(ctx); err != nil {
			return err
		}
		// The consumer's statements, in its transaction.
		conn, err := pgx.Connect(ctx, roleURL)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		in, err := dedup.NewInserter(tbl, "orders-writer")
		if err != nil {
			return err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			res, err := in.Insert(ctx, tx, []uuid.UUID{id, id})
			if err != nil {
				return err
			}
			if !res.Fresh[0] || res.Fresh[1] {
				t.Errorf("schema %s: insert result %+v", schema, res)
			}
			return in.Forget(ctx, tx, id)
		})
		if err != nil {
			return err
		}
		// Expiry (DETACH CONCURRENTLY, DROP), then deletionPolicy Delete.
		if res, err := store.Maintain(ctx, now.Add(10*24*time.Hour), 2, 48*time.Hour); err != nil {
			return err
		} else if len(res.Dropped) == 0 {
			t.Errorf("schema %s: nothing expired", schema)
		}
		return store.DropTable(ctx, uid)
	}

	// No grant: PostgreSQL 15 no longer lets every role create in public.
	if err := lifecycle("public"); err == nil {
		var version int
		_ = admin.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version)
		if version >= 150000 {
			t.Error("a role without grants created a table in public on PostgreSQL 15+")
		}
	} else if reason, _ := classifyDatabaseError(err); reason != kafkav1alpha1.ReasonPermissionDenied {
		t.Errorf("no grant: reason %s (%v), want PermissionDenied", reason, err)
	}

	mustExec("CREATE SCHEMA dedup AUTHORIZATION " + role) // A
	mustExec("CREATE SCHEMA app")                         // B
	mustExec("GRANT USAGE, CREATE ON SCHEMA app TO " + role)
	mustExec("GRANT USAGE, CREATE ON SCHEMA public TO " + role) // C
	for _, schema := range []string{"dedup", "app", "public"} {
		if err := lifecycle(schema); err != nil {
			t.Errorf("schema %s with the documented grants: %v", schema, err)
		}
	}
}
