// A producer service on the transactional outbox (docs/outbox.md): it places
// orders, and each order's event (OrderPlaced) is written to the outbox in the
// SAME TypeORM transaction as the order row. The outbox relay
// (`consumer outbox-relay`) publishes it to Kafka once the transaction has
// committed, keyed by the customer, with the returned id as the eventId header.
//
// So the event is published if and only if the order exists: an error thrown
// after the emit, a failed business write (here: an order id placed twice) or
// a crash before the commit rolls back both; nothing is produced to Kafka from
// here, so there is no "wrote the row but not the event" (or the reverse).
//
//   DATABASE_URL=... OUTBOX_EMIT_FUNCTION=public.outbox_emit OUTBOX_TOPIC=orders \
//     node dist/outbox.js < orders.jsonl
//
// Input: one JSON order a line, {"id", "customer", "amountCents", "fail"?}:
// fail "throw" throws after both writes, "crash" kills the process (SIGKILL,
// no clean-up) after both writes, before the commit. Orders of one customer
// are placed one after the other, in input order; customers are spread over
// CONCURRENCY (default 4) workers placing at the same time. Output: one JSON
// line per order, {"id", "eventId", "committed", "error"?}; before a crash,
// {"id", "eventId", "crashing": true}.
import 'reflect-metadata';
import * as readline from 'node:readline';
import { Column, DataSource, Entity, EntityManager, PrimaryColumn } from 'typeorm';
import { quoteFunctionName } from './claim';

/** The business row (sql/orders.sql). */
@Entity({ name: 'orders' })
export class Order {
  @PrimaryColumn({ type: 'text' })
  id: string;

  @Column({ type: 'text' })
  customer: string;

  @Column({ name: 'amount_cents', type: 'bigint' })
  amountCents: string;

  @Column({ name: 'event_id', type: 'uuid' })
  eventId: string;
}

/** One order to place. */
export interface PlaceOrder {
  id: string;
  customer: string;
  amountCents: number;
  fail?: 'throw' | 'crash';
}

/** An event to write to the outbox. */
export interface OutboxEvent {
  topic: string;
  key: Buffer | null; // the Kafka key: events of one key are published in commit order
  payload: Buffer;
  headers?: Record<string, string>; // Kafka headers besides eventId
  traceparent?: string;
}

/**
 * The emit function's name, validated and quoted: it comes from
 * configuration and is spliced into SQL (a function name cannot be a
 * parameter), so only schema.name of plain identifiers ending in _emit gets
 * through, as src/claim.ts does for the claim function.
 */
export function emitFunctionName(name: string): string {
  if (!name.endsWith('_emit')) {
    throw new Error(`OUTBOX_EMIT_FUNCTION=${JSON.stringify(name)}: want the outbox's <schema>.<table>_emit function`);
  }
  return quoteFunctionName(name, 'emit function');
}

/**
 * Writes one event to the outbox in em's transaction and returns its eventId
 * (a UUID v7 made by the function). em must be a transaction's EntityManager:
 * the event is published if and only if that transaction commits. Every
 * value is a query parameter; only the validated function name is spliced.
 */
export async function emit(em: EntityManager, fn: string, e: OutboxEvent): Promise<string> {
  const rows: Array<{ event_id: string }> = await em.query(
    `SELECT ${fn}($1::text, $2::bytea, $3::bytea, $4::jsonb, $5::text) AS event_id`,
    [e.topic, e.key, e.payload, e.headers ? JSON.stringify(e.headers) : null, e.traceparent ?? null],
  );
  const id = rows[0]?.event_id;
  if (typeof id !== 'string') {
    throw new Error(`emit function ${fn} returned ${JSON.stringify(rows[0])}, not an event id`);
  }
  return id;
}

/** A failure the example throws on purpose after both writes. */
class OrderRejected extends Error {}

export class OrderService {
  constructor(
    private readonly db: DataSource,
    private readonly emitFn: string,
    private readonly topic: string,
  ) {}

  /**
   * Places an order: ONE transaction with the event and the order row. The
   * event is emitted first because the order row keeps its id; the order of
   * the two writes does not matter for atomicity. onEmitted sees the id
   * before the commit (the test uses it to know which ids must never appear).
   */
  async place(o: PlaceOrder, onEmitted: (eventId: string) => void = () => {}): Promise<string> {
    return this.db.transaction(async (em) => {
      const eventId = await emit(em, this.emitFn, {
        topic: this.topic,
        key: Buffer.from(o.customer, 'utf8'),
        payload: Buffer.from(
          JSON.stringify({ type: 'OrderPlaced', orderId: o.id, account: o.customer, amountCents: o.amountCents }),
          'utf8',
        ),
        headers: { type: 'OrderPlaced' },
      });
      onEmitted(eventId);
      await em.insert(Order, { id: o.id, customer: o.customer, amountCents: String(o.amountCents), eventId });
      if (o.fail === 'throw') {
        throw new OrderRejected(`order ${o.id} rejected after its event was emitted`);
      }
      if (o.fail === 'crash') {
        print({ id: o.id, eventId, crashing: true });
        process.kill(process.pid, 'SIGKILL'); // no commit, no rollback: the server ends the transaction
        await new Promise(() => {}); // never resumes
      }
      return eventId;
    });
  }
}

function print(v: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(v) + '\n');
}

function required(name: string): string {
  const v = process.env[name]?.trim();
  if (!v) throw new Error(`${name} is required`);
  return v;
}

async function readOrders(): Promise<PlaceOrder[]> {
  const out: PlaceOrder[] = [];
  for await (const line of readline.createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (line.trim() !== '') out.push(JSON.parse(line) as PlaceOrder);
  }
  return out;
}

async function main(): Promise<void> {
  const emitFn = emitFunctionName(required('OUTBOX_EMIT_FUNCTION'));
  const topic = required('OUTBOX_TOPIC');
  const concurrency = Number(process.env.CONCURRENCY ?? '4');
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new Error('CONCURRENCY: want an integer >= 1');
  const db = new DataSource({
    type: 'postgres',
    url: required('DATABASE_URL'),
    entities: [Order],
    synchronize: false,
    logging: false,
    extra: { max: concurrency, application_name: 'example-ts-outbox' },
  });
  await db.initialize();
  const svc = new OrderService(db, emitFn, topic);
  const orders = await readOrders();
  // One queue per worker; a customer's orders all go to one worker, in order.
  const customers = [...new Set(orders.map((o) => o.customer))];
  const queues: PlaceOrder[][] = Array.from({ length: concurrency }, () => []);
  for (const o of orders) queues[customers.indexOf(o.customer) % concurrency].push(o);
  await Promise.all(
    queues.map(async (q) => {
      for (const o of q) {
        let eventId: string | undefined;
        try {
          await svc.place(o, (id) => (eventId = id));
          print({ id: o.id, eventId, committed: true });
        } catch (e) {
          // Rolled back: the order row and the event are both gone.
          print({ id: o.id, eventId, committed: false, error: String(e) });
        }
      }
    }),
  );
  await db.destroy();
}

main().catch((e) => {
  process.stderr.write(`outbox.js: ${String(e)}\n`);
  process.exit(1);
});
