// An idempotent kafkajs + TypeORM consumer on a dedup table made by the
// idempotent-consumer operator (docs/any-language.md).
//
// For each record, in order, per partition:
//   1. decode the envelope (src/envelope.ts); an undecodable record is handled
//      by policy (dead-letter or skip), never thrown;
//   2. in ONE database transaction: claim the event id with the table's claim
//      function; for 'new', write the ledger row and charge the provider with
//      `Idempotency-Key: <eventId>`; commit;
//   3. handle 'outside_window' / 'not_v7' by policy (dead-letter or skip);
//   4. commit the record's Kafka offset, only after all of the above.
//
// A crash anywhere before 4 redelivers the record: if the transaction had
// committed, the claim says 'duplicate' and nothing is applied twice; if it had
// not, the claim was rolled back with the ledger row, the record is applied
// again, and the provider sees the same Idempotency-Key and charges once.
// Only infrastructure errors (database or provider unreachable) are thrown to
// kafkajs after a few attempts; it retries and restarts the consumer, which
// resumes from the last committed offset. A verdict is never thrown.
import 'reflect-metadata';
import { Consumer, IHeaders, Kafka, KafkaMessage, logLevel, Partitioners, Producer } from 'kafkajs';
import { DataSource } from 'typeorm';
import { claimOne, Verdict } from './claim';
import { Config, loadConfig, Policy } from './config';
import { decode } from './envelope';
import { LedgerEntry } from './ledger';

/** One JSON line per event on stdout; never the database URL or a secret. */
function log(level: 'info' | 'warn' | 'error', msg: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }) + '\n');
}

/** Counters by outcome, logged every few seconds and at exit. */
class Counters {
  private readonly counts = new Map<string, number>();
  private dirty = false;

  add(name: string): void {
    this.counts.set(name, (this.counts.get(name) ?? 0) + 1);
    this.dirty = true;
  }

  snapshot(): Record<string, number> {
    return Object.fromEntries([...this.counts.entries()].sort());
  }

  flush(force = false): void {
    if (this.dirty || force) {
      log('info', 'counts', { counts: this.snapshot() });
      this.dirty = false;
    }
  }
}

/**
 * A charge the provider refused for good: a 4xx other than 408, 409 (an
 * Idempotency-Key still in use), 425 and 429. Retrying the record cannot
 * help, so it is not thrown to kafkajs (which would retry it forever and stall
 * the partition): the transaction rolls back (no claim, no ledger row, so a
 * later replay is applied again) and the record goes to the ON_UNDECODABLE
 * policy with reason 'charge_rejected'.
 */
class ChargeRejected extends Error {}

const RETRYABLE_4XX: ReadonlySet<number> = new Set([408, 409, 425, 429]);

/** A business payload this example understands: a charge request. */
interface ChargeRequest {
  account: string;
  amountCents: number;
}

function chargeRequest(body: Record<string, unknown>, defaultAccount: string): ChargeRequest | string {
  const amount = body.amountCents;
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0) {
    return 'amountCents must be a positive integer';
  }
  const account = body.account ?? defaultAccount;
  if (typeof account !== 'string' || account === '') {
    return 'account must be a non-empty string';
  }
  return { account, amountCents: amount };
}

/** A header's value as text; the first one if it is repeated. */
function headerValue(m: KafkaMessage, name: string): string | undefined {
  let v = m.headers?.[name];
  if (Array.isArray(v)) v = v[0];
  return v === undefined ? undefined : v.toString();
}

class App {
  private readonly kafka: Kafka;
  private readonly consumer: Consumer;
  private readonly producer: Producer;
  private readonly db: DataSource;
  private readonly counters = new Counters();
  private stopping = false;

  constructor(private readonly cfg: Config) {
    this.kafka = new Kafka({
      clientId: `example-ts-${cfg.groupId}`,
      brokers: cfg.brokers,
      logLevel: logLevel.WARN,
      retry: { initialRetryTime: 100, retries: 8 },
    });
    this.consumer = this.kafka.consumer({
      groupId: cfg.groupId,
      sessionTimeout: cfg.sessionTimeoutMs,
      heartbeatInterval: Math.max(50, Math.floor(cfg.sessionTimeoutMs / 10)),
      rebalanceTimeout: Math.max(cfg.sessionTimeoutMs, 10000),
      // How long a fetch waits for records: also how long disconnect() can
      // take, so short enough for a quick shutdown.
      maxWaitTimeInMs: 1000,
      allowAutoTopicCreation: false,
    });
    // Dead letters keep the original key; the v2 default partitioner, named
    // so that kafkajs does not warn about its change from v1.
    this.producer = this.kafka.producer({ allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });
    this.db = new DataSource({
      type: 'postgres',
      url: cfg.databaseUrl,
      entities: [LedgerEntry],
      synchronize: false,
      logging: false,
      extra: { max: cfg.partitionsConsumedConcurrently + 1, application_name: `example-ts-${cfg.groupId}` },
    });
  }

  async start(): Promise<void> {
    await this.db.initialize();
    if (this.cfg.resetOffsets === 'earliest') {
      // A replay: the group must have no members (kafkajs refuses otherwise).
      const admin = this.kafka.admin();
      await admin.connect();
      try {
        await admin.resetOffsets({ groupId: this.cfg.groupId, topic: this.cfg.topic, earliest: true });
      } finally {
        await admin.disconnect();
      }
      log('info', 'offsets reset to earliest', { group: this.cfg.groupId, topic: this.cfg.topic });
    }
    await this.producer.connect();
    await this.consumer.connect();
    this.consumer.on(this.consumer.events.GROUP_JOIN, (e) => {
      log('info', 'joined group', { group: this.cfg.groupId, assignment: e.payload.memberAssignment });
    });
    this.consumer.on(this.consumer.events.CRASH, (e) => {
      log('error', 'consumer crashed', { error: String(e.payload.error), restart: e.payload.restart });
      if (!e.payload.restart) {
        void this.stop(1);
      }
    });
    await this.consumer.subscribe({ topic: this.cfg.topic, fromBeginning: true });
    await this.consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: this.cfg.partitionsConsumedConcurrently,
      eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
        for (const message of batch.messages) {
          if (!isRunning() || isStale() || this.stopping) {
            return; // the rest comes again after the rebalance, from the committed offset
          }
          await this.processRecord(batch.topic, batch.partition, message, heartbeat);
          resolveOffset(message.offset);
          // 4. The offset, after the transaction (and after a dead letter).
          await this.consumer.commitOffsets([
            { topic: batch.topic, partition: batch.partition, offset: (BigInt(message.offset) + 1n).toString() },
          ]);
          await heartbeat();
        }
      },
    });
  }

  private async processRecord(
    topic: string,
    partition: number,
    m: KafkaMessage,
    heartbeat: () => Promise<void>,
  ): Promise<void> {
    const where = { topic, partition, offset: m.offset };
    // 1. Decode (the id from a header when EVENT_ID_HEADER is set).
    const d = decode(m.value, 'eventId', this.cfg.eventIdHeader ? { name: this.cfg.eventIdHeader, value: headerValue(m, this.cfg.eventIdHeader) } : undefined);
    if (!d.ok) {
      await this.byPolicy(this.cfg.onUndecodable, d.reason, d.detail, topic, partition, m, undefined);
      return;
    }
    const req = chargeRequest(d.body, this.cfg.account);
    if (typeof req === 'string') {
      await this.byPolicy(this.cfg.onUndecodable, 'invalid_payload', req, topic, partition, m, d.eventId);
      return;
    }
    // 2. One transaction: claim, then apply only a 'new' event.
    let verdict: Verdict;
    try {
      verdict = await this.claimAndApply(where, heartbeat, d.eventId, req);
    } catch (e) {
      if (!(e instanceof ChargeRejected)) {
        throw e;
      }
      await this.byPolicy(this.cfg.onUndecodable, 'charge_rejected', e.message, topic, partition, m, d.eventId);
      return;
    }
    this.counters.add(verdict);
    switch (verdict) {
      case 'new':
      case 'duplicate':
        return;
      case 'outside_window':
        // Older than the table's retention (or too far in the future): the
        // table cannot say whether it was processed. Default: dead-letter
        // for a person to decide; 'skip' drops it with a log line.
        await this.byPolicy(this.cfg.onOutsideWindow, verdict, 'the id\'s UUID v7 time is outside the dedup window', topic, partition, m, d.eventId);
        return;
      case 'not_v7':
        await this.byPolicy(this.cfg.onNotV7, verdict, 'the event id is not a UUID v7', topic, partition, m, d.eventId);
        return;
    }
  }

  /** 2. The claim and, for a 'new' event, the ledger row and the charge, in one transaction. */
  private async claimAndApply(
    where: object,
    heartbeat: () => Promise<void>,
    eventId: string,
    req: ChargeRequest,
  ): Promise<Verdict> {
    return this.attempts(where, heartbeat, () =>
      this.db.transaction(async (em): Promise<Verdict> => {
        const v = await claimOne(em, this.cfg.claimOneFunction, eventId, this.cfg.groupId);
        if (v !== 'new') {
          return v; // nothing recorded; the transaction commits nothing
        }
        await em
          .createQueryBuilder()
          .insert()
          .into(LedgerEntry)
          .values({
            eventId: eventId,
            consumerGroup: this.cfg.groupId,
            account: req.account,
            amountCents: String(req.amountCents),
          })
          .execute();
        // Inside the transaction, last: if the charge fails, the claim and the
        // ledger row roll back and the record is tried again with the same
        // key; if the commit fails after a charge, the retry's charge carries
        // the same key and the provider applies it once.
        await this.charge(eventId, req);
        return v;
      }),
    );
  }

  /** 3. Dead-letter or skip a record; counts and logs either way. */
  private async byPolicy(
    policy: Policy,
    reason: string,
    detail: string,
    topic: string,
    partition: number,
    m: KafkaMessage,
    eventId: string | undefined,
  ): Promise<void> {
    this.counters.add(`${policy}:${reason}`);
    log('warn', policy === 'skip' ? 'record skipped' : 'record dead-lettered', {
      reason, detail, topic, partition, offset: m.offset, eventId,
    });
    if (policy === 'skip') {
      return;
    }
    // The same headers as the Go runtime's dead letters (consumer/deadletter.go).
    const headers: IHeaders = {};
    for (const [k, v] of Object.entries(m.headers ?? {})) {
      if (!k.startsWith('dlq-') && v !== undefined) headers[k] = v;
    }
    Object.assign(headers, {
      'dlq-reason': reason,
      'dlq-error': detail.slice(0, 1024),
      'dlq-original-topic': topic,
      'dlq-original-partition': String(partition),
      'dlq-original-offset': m.offset,
      'dlq-original-timestamp': new Date(Number(m.timestamp)).toISOString(),
      'dlq-consumer-group': this.cfg.groupId,
      'dlq-time': new Date().toISOString(),
    });
    if (eventId !== undefined) headers['dlq-event-id'] = eventId;
    // acks=-1 (all): the offset is committed only once the dead letter is safe.
    await this.producer.send({
      topic: this.cfg.deadLetterTopic,
      acks: -1,
      messages: [{ key: m.key, value: m.value, headers }],
    });
  }

  /** POSTs the charge; any non-2xx answer is an error (the transaction rolls back). */
  private async charge(eventId: string, req: ChargeRequest): Promise<void> {
    const res = await fetch(this.cfg.chargeUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': eventId },
      body: JSON.stringify({ account: req.account, amountCents: req.amountCents }),
      signal: AbortSignal.timeout(10_000),
    });
    await res.arrayBuffer(); // drain, so the connection is reused
    if (res.status >= 400 && res.status < 500 && !RETRYABLE_4XX.has(res.status)) {
      throw new ChargeRejected(`charging ${eventId}: provider refused it with ${res.status}`);
    }
    if (!res.ok) {
      throw new Error(`charging ${eventId}: provider answered ${res.status}`);
    }
  }

  /**
   * Runs fn up to cfg.attempts times with backoff, heartbeating in between;
   * then throws, and kafkajs retries the batch from the last resolved offset
   * (and in the end restarts the consumer). Only infrastructure errors get
   * here: verdicts are values.
   */
  private async attempts<T>(where: object, heartbeat: () => Promise<void>, fn: () => Promise<T>): Promise<T> {
    let delay = 100;
    for (let i = 1; ; i++) {
      try {
        return await fn();
      } catch (e) {
        if (e instanceof ChargeRejected) {
          throw e; // the same answer on every attempt
        }
        if (i >= this.cfg.attempts || this.stopping) {
          log('error', 'giving up on record for now', { ...where, attempt: i, error: String(e) });
          throw e;
        }
        log('warn', 'record failed; retrying', { ...where, attempt: i, error: String(e) });
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 5000);
        await heartbeat();
      }
    }
  }

  async stop(code: number): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    log('info', 'stopping');
    try {
      await this.consumer.disconnect();
      await this.producer.disconnect();
      await this.db.destroy();
    } catch (e) {
      log('error', 'stopping', { error: String(e) });
      code = code || 1;
    }
    this.counters.flush(true);
    process.exit(code);
  }

  tick(): void {
    this.counters.flush();
  }
}

async function main(): Promise<void> {
  let cfg: Config;
  try {
    cfg = loadConfig();
  } catch (e) {
    log('error', 'configuration', { error: (e as Error).message });
    process.exit(2);
  }
  const app = new App(cfg);
  process.on('SIGTERM', () => void app.stop(0));
  process.on('SIGINT', () => void app.stop(0));
  setInterval(() => app.tick(), 2000).unref();
  await app.start();
  log('info', 'running', { group: cfg.groupId, topic: cfg.topic });
}

main().catch((e) => {
  log('error', 'fatal', { error: String(e) });
  process.exit(1);
});
