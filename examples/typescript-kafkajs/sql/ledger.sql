-- The example's business table: one row per applied charge. It is the
-- application's own table (a migration of the service in real life), not the
-- operator's. Deliberately no unique constraint on event_id: the claim
-- function is what keeps an event from being applied twice, and the example's
-- test counts rows per (consumer_group, event_id) to prove it.
CREATE TABLE IF NOT EXISTS ledger (
    id             bigserial   PRIMARY KEY,
    event_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    account        text        NOT NULL,
    amount_cents   bigint      NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ledger_event_id ON ledger (event_id);
