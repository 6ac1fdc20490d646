// The batch pattern (docs/any-language.md, "The pattern"): kafkajs eachBatch,
// one transaction per chunk of a partition's batch, one call of the batch
// claim function <schema>.<table>_claim for the chunk's ids, the effects of
// the new ones (ledger rows) in the same transaction, the offset committed
// after it. Plain pg, no ORM.
//
// MODE selects what a transaction covers, so that make bench can compare the
// three with one client (RESULT anylang):
//   batch       one transaction per chunk: claim(uuid[]), effects, commit   (the default)
//   per-record  one transaction per record: claim_one(uuid) and the effect in one statement, commit, offset commit
//   naive       per-record without the claim: effect, commit, offset commit (no dedup)
//
// Records the claim will not let through (undecodable, not_v7,
// outside_window) are skipped with a log line and counted: consumer.ts shows
// dead-lettering them instead.
import { Kafka, logLevel, EachBatchPayload, KafkaMessage } from 'kafkajs';
import { Pool, PoolClient } from 'pg';
import { decode } from './envelope';
import { quoteFunctionName } from './claim';

type Mode = 'batch' | 'per-record' | 'naive';

function log(level: 'info' | 'warn' | 'error', msg: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(JSON.stringify({ level, msg, ...fields }) + '\n');
}

function required(name: string): string {
  const v = (process.env[name] ?? '').trim();
  if (v === '') throw new Error(`${name} is required`);
  return v;
}

const mode = (process.env.MODE || 'batch') as Mode;
if (!['batch', 'per-record', 'naive'].includes(mode)) throw new Error(`MODE=${mode}: want batch, per-record or naive`);
const topic = required('KAFKA_TOPIC');
const groupId = required('KAFKA_GROUP_ID');
// The application Secret's keys: claimFunction is the batch function,
// claimOneFunction the per-record one (DEDUP_<KEY>).
const claimFunction = mode === 'batch' ? batchFunction(required('DEDUP_CLAIM_FUNCTION')) : '';
const claimOneFunction = mode === 'per-record' ? quoteFunctionName(required('DEDUP_CLAIM_ONE_FUNCTION')) : '';
const chunkSize = Number(process.env.BATCH_SIZE || '500');

function batchFunction(name: string): string {
  if (!name.endsWith('_claim')) {
    throw new Error(
      `DEDUP_CLAIM_FUNCTION=${JSON.stringify(name)}: want the batch function <schema>.<table>_claim ` +
        "(the application Secret's key claimFunction; claimOneFunction is the per-record one)",
    );
  }
  return quoteFunctionName(name);
}

const counts: Record<string, number> = {};
const count = (k: string, n = 1) => (counts[k] = (counts[k] ?? 0) + n);

/** A record the claim may see: its id and the ledger row it makes. */
interface Entry {
  eventId: string;
  account: string;
  amountCents: number;
}

function entryOf(m: KafkaMessage): Entry | undefined {
  const d = decode(m.value);
  if (!d.ok) {
    count(`skip:${d.reason}`);
    log('warn', 'record skipped', { reason: d.reason, offset: m.offset });
    return undefined;
  }
  const amount = Number(d.body.amountCents);
  return { eventId: d.eventId, account: String(d.body.account ?? 'example'), amountCents: Number.isInteger(amount) ? amount : 0 };
}

async function insertLedger(c: PoolClient, es: Entry[]): Promise<void> {
  if (es.length === 0) return;
  await c.query(
    'INSERT INTO ledger (event_id, consumer_group, account, amount_cents) SELECT e, $2, a, c FROM unnest($1::uuid[], $3::text[], $4::bigint[]) AS u(e, a, c)',
    [es.map((e) => e.eventId), groupId, es.map((e) => e.account), es.map((e) => e.amountCents)],
  );
}

async function inTransaction<T>(pool: Pool, f: (c: PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    const out = await f(c);
    await c.query('COMMIT');
    return out;
  } catch (e) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw e;
  } finally {
    c.release();
  }
}

async function main(): Promise<void> {
  const pool = new Pool({ connectionString: required('DATABASE_URL'), max: 4 });
  const kafka = new Kafka({
    clientId: `example-batch-${mode}`,
    brokers: required('KAFKA_BROKERS').split(','),
    logLevel: logLevel.WARN,
  });
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: Number(process.env.SESSION_TIMEOUT_MS || '10000'),
    maxWaitTimeInMs: 200,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });

  const commit = (partition: number, m: KafkaMessage) =>
    consumer.commitOffsets([{ topic, partition, offset: (BigInt(m.offset) + 1n).toString() }]);

  const eachBatch = async ({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload) => {
    const msgs = batch.messages;
    if (mode !== 'batch') {
      for (const m of msgs) {
        if (!isRunning() || isStale()) return;
        const e = entryOf(m);
        if (e) {
          const verdict = await inTransaction(pool, async (c) => {
            if (mode === 'naive') {
              await insertLedger(c, [e]);
              return 'new';
            }
            // The claim and the effect in one statement (one round trip, as
            // naive's insert): the ledger row is written only for 'new'.
            const r = await c.query(
              `WITH c AS MATERIALIZED (SELECT ${claimOneFunction}($1::uuid, $2::text) AS verdict),
                    ins AS (INSERT INTO ledger (event_id, consumer_group, account, amount_cents)
                            SELECT $1::uuid, $2::text, $3::text, $4::bigint FROM c WHERE c.verdict = 'new')
               SELECT verdict FROM c`,
              [e.eventId, groupId, e.account, e.amountCents],
            );
            return r.rows[0].verdict as string;
          });
          count(verdict === 'new' || verdict === 'duplicate' ? verdict : `skip:${verdict}`);
        }
        await commit(batch.partition, m);
        resolveOffset(m.offset);
        await heartbeat();
      }
      return;
    }
    for (let i = 0; i < msgs.length; i += chunkSize) {
      if (!isRunning() || isStale()) return;
      const chunk = msgs.slice(i, i + chunkSize);
      const entries = chunk.map(entryOf).filter((e): e is Entry => e !== undefined);
      if (entries.length > 0) {
        const verdicts = await inTransaction(pool, async (c) => {
          // One row per input element, in input order (WITH ORDINALITY keeps it explicit).
          const r = await c.query(
            `SELECT c.verdict FROM ${claimFunction}($1::uuid[], $2::text) WITH ORDINALITY AS c(event_id, verdict, n) ORDER BY c.n`,
            [entries.map((e) => e.eventId), groupId],
          );
          const vs: string[] = r.rows.map((row) => row.verdict);
          await insertLedger(c, entries.filter((_, k) => vs[k] === 'new'));
          return vs;
        });
        verdicts.forEach((v, k) => {
          count(v === 'new' || v === 'duplicate' ? v : `skip:${v}`);
          if (v !== 'new' && v !== 'duplicate') log('warn', 'record skipped', { reason: v, eventId: entries[k].eventId });
        });
      }
      const last = chunk[chunk.length - 1];
      await commit(batch.partition, last);
      resolveOffset(last.offset);
      await heartbeat();
    }
  };

  await consumer.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch });
  log('info', 'running', { mode, group: groupId });
  const ticker = setInterval(() => log('info', 'counts', { counts }), 500);

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    clearInterval(ticker);
    await consumer.disconnect().catch(() => undefined);
    await pool.end().catch(() => undefined);
    log('info', 'counts', { counts });
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((e) => {
  log('error', 'fatal', { error: String(e) });
  process.exit(1);
});
