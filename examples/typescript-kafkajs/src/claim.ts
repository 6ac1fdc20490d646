import { EntityManager } from 'typeorm';

/**
 * The claim function's verdicts (docs/any-language.md, "The SQL contract"):
 *  - 'new':            the id was not recorded; it is now, in the caller's
 *                      transaction. Apply the event, then commit.
 *  - 'duplicate':      already recorded (by this group, or by any group on a
 *                      Global table). Skip it.
 *  - 'outside_window': a UUID v7 whose time no partition covers (older than the
 *                      retention, or too far in the future). Nothing recorded.
 *  - 'not_v7':         not a UUID v7. Nothing recorded.
 * The function never raises for an id, so it never aborts the transaction.
 */
export type Verdict = 'new' | 'duplicate' | 'outside_window' | 'not_v7';

const VERDICTS: ReadonlySet<string> = new Set(['new', 'duplicate', 'outside_window', 'not_v7']);

// schema.name, each part an identifier the operator accepts: the name comes
// from configuration (the operator publishes it) and is spliced into SQL, so
// nothing else gets through.
const FUNCTION_NAME = /^([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)$/;

/**
 * Returns the quoted, schema-qualified name of a function the operator
 * publishes, e.g. "billing"."processed_event_claim_one" for
 * "billing.processed_event_claim_one" (what names it in errors).
 */
export function quoteFunctionName(name: string, what = 'claim function'): string {
  const m = FUNCTION_NAME.exec(name);
  if (!m) {
    throw new Error(`${what} ${JSON.stringify(name)}: want schema.name in lower-case letters, digits and underscores`);
  }
  return `"${m[1]}"."${m[2]}"`;
}

/**
 * Claims one event id for the consumer group inside the caller's transaction
 * (em must be a transaction's EntityManager: the claim is undone with it).
 *
 * Why a function and not an INSERT built with TypeORM: the obvious TypeORM
 * duplicate check is wrong.
 *
 *   // WRONG: never skips anything.
 *   const r = await em.createQueryBuilder().insert().into(ProcessedEvent)
 *     .values({ eventId, consumerGroup }).orIgnore().execute();
 *   if (!r.identifiers.length) return; // "duplicate"
 *
 * TypeORM fills InsertResult.identifiers from the values it sent, not from
 * what the database inserted, so a conflicting row that ON CONFLICT DO NOTHING
 * skipped still yields one identifier: every duplicate and every replay is
 * applied again. What the database says is in raw, with RETURNING:
 *
 *   // RIGHT: raw holds the rows actually inserted.
 *   const r = await em.createQueryBuilder().insert().into(ProcessedEvent)
 *     .values({ eventId, consumerGroup }).orIgnore().returning('event_id').execute();
 *   if (r.raw.length === 0) return; // duplicate
 *
 * Even the right INSERT fails with SQLSTATE 23514 (no partition for the row)
 * for an id outside the table's window, which aborts the transaction; thrown
 * from eachMessage/eachBatch, kafkajs retries it, restarts the consumer and
 * retries again, forever, stalling the partition. The claim function turns
 * that into the 'outside_window' verdict instead. src/pitfall.ts shows both
 * INSERT forms against a real table (the example's test runs it).
 */
export async function claimOne(em: EntityManager, fn: string, eventId: string, group: string): Promise<Verdict> {
  const rows: Array<{ verdict: string }> = await em.query(
    `SELECT ${fn}($1::uuid, $2::text) AS verdict`,
    [eventId, group],
  );
  const v = rows[0]?.verdict;
  if (v === undefined || !VERDICTS.has(v)) {
    // A newer operator may add verdicts; refusing loudly beats guessing.
    throw new Error(`claim function ${fn} returned ${JSON.stringify(v)}, not one of ${[...VERDICTS].join(', ')}`);
  }
  return v as Verdict;
}
