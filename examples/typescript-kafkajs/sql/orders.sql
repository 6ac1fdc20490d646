-- The producer's business table (src/outbox.ts): one row per placed order,
-- written in the same transaction as the order's outbox event. The
-- application's own table, like sql/ledger.sql; event_id is the id the emit
-- function returned, kept so the two can be joined.
CREATE TABLE IF NOT EXISTS orders (
    id           text        PRIMARY KEY,
    customer     text        NOT NULL,
    amount_cents bigint      NOT NULL,
    event_id     uuid        NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now()
);
