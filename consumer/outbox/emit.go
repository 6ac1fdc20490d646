package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The emit function, installed by Ensure:
//
//	<schema>.<name>_emit(topic text, key bytea, payload bytea,
//	                     headers jsonb DEFAULT NULL, traceparent text DEFAULT NULL)
//	    RETURNS uuid
//
// It inserts one event in the caller's transaction and returns its eventId,
// a UUID v7 made in the call. docs/outbox.md is the contract for clients.
//
// What makes the relay's per-key order hold (docs/design.md, "The outbox"):
//   - A non-NULL key first takes a transaction advisory lock on a hash of
//     (table, topic, key), so two transactions that emit on one key are
//     serialised until the first one ends: their commit order is the order
//     in which they took the lock.
//   - The id is made after the lock is taken, from clock_timestamp() to the
//     microsecond (48 bits of milliseconds, then the sub-millisecond part in
//     the 12 bits RFC 9562 calls rand_a, "method 3"), so a later holder of
//     the lock gets a larger id as long as the server's clock does not step
//     back: id order is commit order for a key. Within one transaction the
//     microseconds never repeat or go back (a transaction-local setting
//     keeps the last one), so its events on a key keep their emit order.
//   - pg_notify is sent at commit only (and folded into one per transaction
//     by the server): a relay waiting on LISTEN wakes when there is a
//     committed row. PostgreSQL cannot PREPARE a transaction that sent
//     NOTIFY: with the setting idempotency_outbox.notify 'off' (SET LOCAL,
//     for an XA/JTA transaction) none is sent, and the relay finds the row
//     by polling.
//
// The function sets synchronous_commit to on for the rest of the caller's
// transaction when it is off or local: the relay publishes what is visible,
// and a commit made visible before it is flushed (or before the synchronous
// standbys have it) could be lost after its event is in Kafka.
//
// With a limit (WithMaxMessageBytes), an event whose record would be larger
// than the relay sends is refused (SQLSTATE 54000, program_limit_exceeded):
// committed, it would hold the stream until the limit is raised. The size
// is reckoned as messageSize reckons the relay's record (emitSizeBase).
//
// SECURITY INVOKER with a pinned search_path, as the claim functions: it runs
// with the caller's privileges (INSERT on the table), and no operator or
// type of the caller's schemas can change what it does.
func emitFunctionSQL(t Table, o ensureOptions) string {
	t = t.WithDefaults()
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	maxMessageBytes := o.maxMessageBytes
	topicCheck := ""
	if len(o.topics) > 0 {
		lits := make([]string, len(o.topics))
		for i, tp := range o.topics {
			lits[i] = lit(tp)
		}
		list := strings.Join(o.topics, ", ")
		topicCheck = fmt.Sprintf(`
  IF NOT ($1 = ANY (ARRAY[%s]::text[])) THEN
    RAISE EXCEPTION 'emitting to outbox %s: topic %% is not one the outbox publishes to (%s): committed, it would hold the relay''s stream or go where the service should not publish; add it to the Outbox''s spec.kafka.topics', pg_catalog.quote_literal($1)
      USING ERRCODE = '22023';
  END IF;`, strings.Join(lits, ", "), strings.ReplaceAll(t.String(), "'", "''"), strings.ReplaceAll(strings.ReplaceAll(list, "'", "''"), "%", "%%"))
	}
	sizeCheck := topicCheck
	if maxMessageBytes > 0 {
		sizeCheck += fmt.Sprintf(`
  _size := %d + octet_length($1) + coalesce(octet_length($2), 0) + coalesce(octet_length($3), 0)
           + coalesce((SELECT sum(octet_length(e.key) + octet_length(e.value) + 8) FROM jsonb_each_text(_h) e), 0);
  IF _size > %d THEN
    RAISE EXCEPTION 'emitting to outbox %s: the event''s record to topic %% would be about %% bytes, over the relay''s limit of %d bytes: committed, it would hold the outbox''s stream; make it smaller, or raise the limit (spec.relay.maxMessageBytes, CONSUMER_OUTBOX_MAX_MESSAGE_BYTES) and the topic''s max.message.bytes', $1, _size
      USING ERRCODE = '54000';
  END IF;`, emitSizeBase(t), maxMessageBytes, strings.ReplaceAll(t.String(), "'", "''"), maxMessageBytes)
	}
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s(topic text, key bytea, payload bytea, headers jsonb DEFAULT NULL, traceparent text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT SECURITY INVOKER PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $idempotency_emit$
DECLARE
  _us bigint;
  _last bigint;
  _id uuid;
  _size bigint;
  _h jsonb := coalesce($4, '{}'::jsonb);
BEGIN
  IF $1 IS NULL OR $1 = '' THEN
    RAISE EXCEPTION 'emitting to outbox %s: topic is required' USING ERRCODE = '22023';
  END IF;
  IF jsonb_typeof(_h) <> 'object' OR EXISTS (SELECT 1 FROM jsonb_each(_h) e WHERE jsonb_typeof(e.value) <> 'string') THEN
    RAISE EXCEPTION 'emitting to outbox %s: headers must be a JSON object of strings, got %%', _h USING ERRCODE = '22023';
  END IF;
  IF $5 IS NOT NULL AND $5 <> '' THEN
    _h := _h || jsonb_build_object('traceparent', $5);
  END IF;
  -- Visible must mean durable: a commit that returns before its WAL is
  -- flushed (off) is visible at once, the relay publishes its event, and a
  -- crash loses the transaction; one that does not wait for the
  -- synchronous standbys (local) is lost by a failover to them.
  IF current_setting('synchronous_commit') IN ('off', 'local') THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;%s
  IF $2 IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(%d, hashtext($1 || ':' || encode($2, 'base64')));
  END IF;
  _us := floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  -- Within a transaction, never below the previous call's (a clock step
  -- back, or two calls within one microsecond).
  _last := nullif(current_setting('idempotency_outbox.last_us', true), '')::bigint;
  IF _us <= _last THEN
    _us := _last + 1;
  END IF;
  PERFORM set_config('idempotency_outbox.last_us', _us::text, true);
  _id := (lpad(to_hex(_us / 1000), 12, '0')
          || to_hex(28672 + ((_us %% 1000) * 4096) / 1000)
          || substr(replace(gen_random_uuid()::text, '-', ''), 17, 16))::uuid;
  INSERT INTO %s (event_id, topic, key, payload, headers) VALUES (_id, $1, $2, $3, _h);
  IF current_setting('idempotency_outbox.notify', true) IS DISTINCT FROM 'off' THEN
    PERFORM pg_notify(%s, '');
  END IF;
  RETURN _id;
END
$idempotency_emit$`, pgx.Identifier{t.Schema, t.Name + emitSuffix}.Sanitize(), t, t, sizeCheck, keyLockClass(t), t.ident(), lit(t.Channel()))
}

// emitSizeBase is what messageSize counts for a record of t besides the
// topic, the key, the payload and the headers given (traceparent among
// them): the framing and the headers the relay adds (row.message), with
// ce_time at its longest. A header given that replaces one of the relay's
// is counted twice: the estimate errs on the large side.
func emitSizeBase(t Table) int {
	const framing, perHeader, ceTimeMax = 64, 8, len("2006-01-02T15:04:05.999999999Z")
	source := "/outbox/" + t.WithDefaults().String()
	return framing +
		len("eventId") + 36 + perHeader +
		len("ce_specversion") + len(ceSpecVersion) + perHeader +
		len("ce_id") + 36 + perHeader +
		len("ce_source") + len(source) + perHeader +
		len("ce_time") + ceTimeMax + perHeader +
		len("ce_type") + perHeader // + the topic, counted in SQL
}

// keyLockClass is the first half of the per-key advisory lock: a hash of the
// table's name, so two outboxes' keys do not serialise each other (a
// collision only costs waiting, never order).
func keyLockClass(t Table) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte("idempotency.dev/outbox\x00" + t.String()))
	return int32(h.Sum32()) //nolint:gosec // G115: the hash's 32 bits as an int4 lock key; wrapping is intended
}

// Message is one event to emit.
type Message struct {
	// Topic is the Kafka topic; required.
	Topic string
	// Key is the Kafka key; events with one key are published in commit
	// order. nil: no key (and no order).
	Key []byte
	// Payload is the record's value.
	Payload []byte
	// Headers are added as Kafka headers, besides eventId.
	Headers map[string]string
	// Traceparent, if set, is sent as the traceparent header.
	Traceparent string
}

// Emit writes m to the outbox in tx (the handler's dedup transaction, or any
// transaction of the caller) and returns its eventId. The event is published
// if and only if tx commits.
func Emit(ctx context.Context, tx pgx.Tx, t Table, m Message) (uuid.UUID, error) {
	if m.Topic == "" {
		return uuid.Nil, errors.New("emitting to the outbox: topic is required")
	}
	var headers []byte
	if len(m.Headers) > 0 {
		var err error
		if headers, err = json.Marshal(m.Headers); err != nil {
			return uuid.Nil, fmt.Errorf("emitting to the outbox: encoding headers: %w", err)
		}
	}
	var tp *string
	if m.Traceparent != "" {
		tp = &m.Traceparent
	}
	var id uuid.UUID
	err := tx.QueryRow(ctx, "SELECT "+emitIdent(t)+"($1, $2, $3, $4::jsonb, $5)",
		m.Topic, m.Key, m.Payload, headers, tp).Scan(&id)
	if err != nil {
		return uuid.Nil, fmt.Errorf("emitting to the outbox %s: %w", t, err)
	}
	return id, nil
}
