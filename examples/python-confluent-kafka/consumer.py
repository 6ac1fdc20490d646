"""The batch pattern in Python (docs/any-language.md, "The pattern").

confluent-kafka (librdkafka) and psycopg 3, as Debian packages them
(python3-confluent-kafka, python3-psycopg): for each batch that consume()
returns, one transaction with one call of the batch claim function
<schema>.<table>_claim for the batch's ids and the ledger rows of the new
ones, then the offsets committed (synchronously) after it. Records the claim
does not let through (undecodable, not_v7, outside_window) are skipped with
a log line and counted.

Environment: KAFKA_BROKERS, KAFKA_TOPIC, KAFKA_GROUP_ID, DATABASE_URL,
DEDUP_CLAIM_FUNCTION (the application Secret's key claimFunction:
<schema>.<table>_claim), BATCH_SIZE (default 500), SESSION_TIMEOUT_MS.
"""
import json
import os
import re
import signal
import sys

import psycopg
from psycopg import sql
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

# Canonical UUID text only; fullmatch, not match with "$" (which also matches
# before a final newline, which PostgreSQL refuses).
CANONICAL = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def log(level, msg, **fields):
    print(json.dumps({"level": level, "msg": msg, **fields}), flush=True)


def required(name):
    v = os.environ.get(name, "").strip()
    if not v:
        raise SystemExit(f"{name} is required")
    return v


def decode(value):
    """Returns (entry, None) or (None, reason); never raises."""
    if not value:
        return None, "not_json"
    try:
        body = json.loads(value)
    except ValueError:
        return None, "not_json"
    if not isinstance(body, dict) or not isinstance(body.get("eventId"), str):
        return None, "missing_id"
    if not CANONICAL.fullmatch(body["eventId"]):
        return None, "invalid_uuid"
    amount = body.get("amountCents")
    return (body["eventId"], str(body.get("account", "example")), amount if isinstance(amount, int) else 0), None


def main():
    fn = required("DEDUP_CLAIM_FUNCTION")
    if not fn.endswith("_claim") or fn.count(".") != 1:
        raise SystemExit(f"DEDUP_CLAIM_FUNCTION={fn!r}: want the batch function <schema>.<table>_claim "
                         "(the application Secret's key claimFunction; claimOneFunction is the per-record one)")
    schema, name = fn.split(".")
    claim = sql.SQL("SELECT c.verdict FROM {}(%s::uuid[], %s::text) WITH ORDINALITY AS c(event_id, verdict, n) ORDER BY c.n").format(
        sql.Identifier(schema, name))
    group, topic = required("KAFKA_GROUP_ID"), required("KAFKA_TOPIC")
    batch_size = int(os.environ.get("BATCH_SIZE", "500"))
    consumer = Consumer({
        "bootstrap.servers": required("KAFKA_BROKERS"),
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": int(os.environ.get("SESSION_TIMEOUT_MS", "10000")),
    })
    consumer.subscribe([topic])
    conn = psycopg.connect(required("DATABASE_URL"))
    counts = {}

    def count(k, n=1):
        counts[k] = counts.get(k, 0) + n

    running = True

    def stop(*_):
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log("info", "running", group=group)
    while running:
        msgs = consumer.consume(num_messages=batch_size, timeout=0.2)
        if not msgs:
            continue
        entries, last = [], {}
        for m in msgs:
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            last[m.partition()] = max(last.get(m.partition(), -1), m.offset())
            entry, reason = decode(m.value())
            if entry is None:
                count("skip:" + reason)
                log("warn", "record skipped", reason=reason, partition=m.partition(), offset=m.offset())
            else:
                entries.append(entry)
        if entries:
            with conn.transaction():
                verdicts = [r[0] for r in conn.execute(claim, ([e[0] for e in entries], group)).fetchall()]
                new = [e for e, v in zip(entries, verdicts) if v == "new"]
                if new:
                    conn.execute(
                        "INSERT INTO ledger (event_id, consumer_group, account, amount_cents) "
                        "SELECT e, %s, a, c FROM unnest(%s::uuid[], %s::text[], %s::bigint[]) AS u(e, a, c)",
                        (group, [e[0] for e in new], [e[1] for e in new], [e[2] for e in new]))
            for e, v in zip(entries, verdicts):
                count(v if v in ("new", "duplicate") else "skip:" + v)
                if v not in ("new", "duplicate"):
                    log("warn", "record skipped", reason=v, eventId=e[0])
        # After the transaction: the next offset of each partition.
        consumer.commit(offsets=[TopicPartition(topic, p, o + 1) for p, o in last.items()], asynchronous=False)
        log("info", "counts", counts=counts)
    consumer.close()
    conn.close()
    log("info", "counts", counts=counts)


if __name__ == "__main__":
    sys.exit(main())
