package outbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGrant_LeastPrivilege: an emitter role can emit but not read, update
// or delete outbox rows, nor read the relays' lock key, and a role given
// nothing cannot even call the emit function; a relay role runs the relay
// and cannot insert.
func TestGrant_LeastPrivilege(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	e.kafka.MustCreateTopic(t, "orders", 1)
	url := e.pool.Config().ConnString()
	emitter := consumertest.NewRole(t, url, "emitter")
	relayRole := consumertest.NewRole(t, url, "relay")
	nobody := consumertest.NewRole(t, url, "nobody")
	if err := outbox.Grant(ctx, e.pool, e.tbl, emitter.Name, outbox.AccessEmitter); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Grant(ctx, e.pool, e.tbl, relayRole.Name, outbox.AccessRelay); err != nil {
		t.Fatal(err)
	}
	connect := func(u string) *pgx.Conn {
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	denied := func(c *pgx.Conn, sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s: %v, want permission denied", sql, err)
		}
	}
	em := connect(emitter.URL)
	var id string
	if err := em.QueryRow(ctx, `SELECT public.outbox_emit('orders', 'k'::bytea, 'p'::bytea)::text`).Scan(&id); err != nil {
		t.Fatalf("emitter emitting: %v", err)
	}
	denied(em, `SELECT count(*) FROM public.outbox`)
	denied(em, `UPDATE public.outbox SET topic = 'x'`)
	denied(em, `DELETE FROM public.outbox`)
	denied(em, `SELECT lock_key FROM public.outbox_relay`)
	// The emitter writes the event's columns, never the transaction id the
	// relay orders by, nor the creation time.
	v7, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	denied(em, `INSERT INTO public.outbox (event_id, topic, key, payload, tx) VALUES ('`+v7.String()+`', 'orders', 'k', 'p', '3'::xid8)`)
	denied(em, `INSERT INTO public.outbox (event_id, topic, key, payload, created_at) VALUES ('`+v7.String()+`', 'orders', 'k', 'p', now() - interval '1 day')`)
	denied(connect(nobody.URL), `SELECT public.outbox_emit('orders', 'k'::bytea, 'p'::bytea)`)
	rc := connect(relayRole.URL)
	denied(rc, `INSERT INTO public.outbox (event_id, topic) VALUES (gen_random_uuid(), 'x')`)
	// The relay moves the cursor, never the relays' lock key (which would
	// let a second owner in).
	denied(rc, `UPDATE public.outbox_relay SET lock_key = lock_key + 1`)

	cfg, err := pgx.ParseConfig(relayRole.URL)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(t, func(c *outbox.Config) { c.ConnConfig = cfg })
	waitFor(t, 20*time.Second, "the row published by the relay role", func() bool { return testutil.ToFloat64(r.metrics.Published) == 1 })
	if got := e.readTopic(t, "orders", 1, 1, 10*time.Second); len(got) != 1 || got[0].id != id {
		t.Errorf("published %v, want %s", got, id)
	}
}

// TestRevoke_TakesBackWhatGrantGave (review finding 5): a role that no
// longer emits or relays (removed from an Outbox's emitterRoles, or a
// relay role rotated) loses what Grant gave it on the outbox, and nothing
// else: another role keeps its grants.
func TestRevoke_TakesBackWhatGrantGave(t *testing.T) {
	ctx := testCtx(t)
	e := newRelayEnv(t)
	url := e.pool.Config().ConnString()
	old := consumertest.NewRole(t, url, "oldemitter")
	kept := consumertest.NewRole(t, url, "keptemitter")
	relayRole := consumertest.NewRole(t, url, "oldrelay")
	for _, g := range []struct {
		role   string
		access outbox.Access
	}{{old.Name, outbox.AccessEmitter}, {kept.Name, outbox.AccessEmitter}, {relayRole.Name, outbox.AccessRelay}} {
		if err := outbox.Grant(ctx, e.pool, e.tbl, g.role, g.access); err != nil {
			t.Fatal(err)
		}
	}
	if err := outbox.Revoke(ctx, e.pool, e.tbl, old.Name, outbox.AccessEmitter); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Revoke(ctx, e.pool, e.tbl, relayRole.Name, outbox.AccessRelay); err != nil {
		t.Fatal(err)
	}
	has := func(role, q string, args ...any) bool {
		t.Helper()
		var ok bool
		if err := e.pool.QueryRow(ctx, q, append([]any{role}, args...)...).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	fn := "public.outbox_emit(text, bytea, bytea, jsonb, text)"
	for _, c := range []struct {
		what string
		got  bool
		want bool
	}{
		{"old emitter EXECUTE", has(old.Name, `SELECT has_function_privilege($1, $2, 'EXECUTE')`, fn), false},
		{"old emitter INSERT (topic)", has(old.Name, `SELECT has_column_privilege($1, 'public.outbox', 'topic', 'INSERT')`), false},
		{"kept emitter EXECUTE", has(kept.Name, `SELECT has_function_privilege($1, $2, 'EXECUTE')`, fn), true},
		{"kept emitter INSERT (topic)", has(kept.Name, `SELECT has_column_privilege($1, 'public.outbox', 'topic', 'INSERT')`), true},
		{"old relay SELECT", has(relayRole.Name, `SELECT has_table_privilege($1, 'public.outbox', 'SELECT')`), false},
		{"old relay cursor UPDATE (lo)", has(relayRole.Name, `SELECT has_column_privilege($1, 'public.outbox_relay', 'lo', 'UPDATE')`), false},
		{"old relay cursor SELECT", has(relayRole.Name, `SELECT has_table_privilege($1, 'public.outbox_relay', 'SELECT')`), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
}
