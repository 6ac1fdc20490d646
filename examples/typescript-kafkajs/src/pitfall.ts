// Shows the TypeORM duplicate-check pitfall against a real dedup table: the
// same id inserted twice with .orIgnore(), once read the wrong way
// (identifiers) and once the right way (.returning() and raw). Everything runs
// in a transaction that is rolled back, so the table is left as it was.
//
//   DATABASE_URL=... DEDUP_TABLE=billing.processed_event EVENT_ID=<uuid v7 in the window> \
//     node dist/pitfall.js
//
// It prints one JSON line; the example's test checks it, so the claim in
// docs/any-language.md stays true for the TypeORM version in package-lock.json.
import 'reflect-metadata';
import { DataSource, EntitySchema, QueryRunner } from 'typeorm';

interface ProcessedEvent {
  eventId: string;
  consumerGroup: string;
}

async function insert(qr: QueryRunner, entity: EntitySchema<ProcessedEvent>, eventId: string, returning: boolean) {
  let q = qr.manager
    .createQueryBuilder()
    .insert()
    .into(entity)
    .values({ eventId, consumerGroup: 'pitfall-demo' })
    .orIgnore();
  if (returning) {
    q = q.returning('event_id');
  }
  const r = await q.execute();
  return { identifiers: r.identifiers.length, raw: Array.isArray(r.raw) ? r.raw.length : -1 };
}

async function main(): Promise<void> {
  const [schema, table] = (process.env.DEDUP_TABLE ?? '').split('.');
  const eventId = process.env.EVENT_ID ?? '';
  if (!schema || !table || !eventId) {
    throw new Error('DATABASE_URL, DEDUP_TABLE (schema.table) and EVENT_ID are required');
  }
  const entity = new EntitySchema<ProcessedEvent>({
    name: 'ProcessedEvent',
    schema,
    tableName: table,
    columns: {
      eventId: { name: 'event_id', type: 'uuid', primary: true },
      consumerGroup: { name: 'consumer_group', type: 'text', primary: true },
    },
  });
  const db = new DataSource({ type: 'postgres', url: process.env.DATABASE_URL, entities: [entity], logging: false });
  await db.initialize();
  const qr = db.createQueryRunner();
  await qr.startTransaction();
  try {
    const rightFirst = await insert(qr, entity, eventId, true);
    const rightDuplicate = await insert(qr, entity, eventId, true);
    const wrongDuplicate = await insert(qr, entity, eventId, false);
    // rightFirst.raw is 1 and rightDuplicate.raw is 0: RETURNING reports what
    // the database inserted. wrongDuplicate.identifiers is 1 although nothing
    // was inserted: "if (!result.identifiers.length) return" never skips.
    process.stdout.write(JSON.stringify({ rightFirst, rightDuplicate, wrongDuplicate }) + '\n');
  } finally {
    await qr.rollbackTransaction();
    await qr.release();
    await db.destroy();
  }
}

main().catch((e) => {
  process.stderr.write(`pitfall: ${String(e)}\n`);
  process.exit(1);
});
