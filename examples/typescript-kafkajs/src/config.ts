import { quoteFunctionName } from './claim';

/** What to do with a record the claim function will not let through. */
export type Policy = 'dead-letter' | 'skip';

/** The consumer's settings, all from the environment (12-factor, as in a Deployment). */
export interface Config {
  brokers: string[];
  topic: string;
  groupId: string;
  deadLetterTopic: string;
  databaseUrl: string;
  /**
   * Quoted schema-qualified per-id claim function, e.g. "billing"."processed_event_claim_one":
   * the application Secret's key claimOneFunction (the key claimFunction is the batch function).
   */
  claimOneFunction: string;
  chargeUrl: string;
  account: string;
  onOutsideWindow: Policy;
  onNotV7: Policy;
  onUndecodable: Policy;
  resetOffsets: 'earliest' | '';
  /**
   * When set, the event id is read from this Kafka header instead of the
   * value's "eventId" field: "eventId" for records the outbox relay
   * publishes (the id is made by the emit function, so it is not in the
   * payload). Default: the value.
   */
  eventIdHeader: string;
  sessionTimeoutMs: number;
  partitionsConsumedConcurrently: number;
  attempts: number;
}

function required(env: NodeJS.ProcessEnv, name: string): string {
  const v = env[name];
  if (v === undefined || v.trim() === '') {
    throw new Error(`${name} is required`);
  }
  return v.trim();
}

function policy(env: NodeJS.ProcessEnv, name: string): Policy {
  const v = env[name] ?? 'dead-letter';
  if (v !== 'dead-letter' && v !== 'skip') {
    throw new Error(`${name}=${JSON.stringify(v)}: want dead-letter or skip`);
  }
  return v;
}

function int(env: NodeJS.ProcessEnv, name: string, def: number, min: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) {
    throw new Error(`${name}=${JSON.stringify(raw)}: want an integer >= ${min}`);
  }
  return n;
}

/**
 * Reads the configuration. The names follow the application Secret's keys
 * (status.applicationSecretName) where they overlap: the Secret's key
 * claimOneFunction is the field claimOneFunction and the variable
 * DEDUP_CLAIM_ONE_FUNCTION (<schema>.<table>_claim_one); the key claimFunction
 * (the batch function, <schema>.<table>_claim) would be DEDUP_CLAIM_FUNCTION.
 * A test (examples/typescript-kafkajs/names_test.go) holds them together.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const topic = required(env, 'KAFKA_TOPIC');
  const reset = env.RESET_OFFSETS ?? '';
  if (reset !== '' && reset !== 'earliest') {
    throw new Error(`RESET_OFFSETS=${JSON.stringify(reset)}: want earliest or nothing`);
  }
  return {
    brokers: required(env, 'KAFKA_BROKERS').split(',').map((s) => s.trim()).filter(Boolean),
    topic,
    groupId: required(env, 'KAFKA_GROUP_ID'),
    deadLetterTopic: env.DEAD_LETTER_TOPIC || `${topic}.dlq`,
    databaseUrl: required(env, 'DATABASE_URL'),
    claimOneFunction: perRecordFunction(required(env, 'DEDUP_CLAIM_ONE_FUNCTION')),
    chargeUrl: required(env, 'CHARGE_URL'),
    account: env.CHARGE_ACCOUNT || 'example',
    onOutsideWindow: policy(env, 'ON_OUTSIDE_WINDOW'),
    onNotV7: policy(env, 'ON_NOT_V7'),
    onUndecodable: policy(env, 'ON_UNDECODABLE'),
    resetOffsets: reset,
    eventIdHeader: (env.EVENT_ID_HEADER ?? '').trim(),
    sessionTimeoutMs: int(env, 'SESSION_TIMEOUT_MS', 10000, 100),
    partitionsConsumedConcurrently: int(env, 'PARTITIONS_CONSUMED_CONCURRENTLY', 2, 1),
    attempts: int(env, 'ATTEMPTS', 5, 1),
  };
}

/**
 * The per-record function's name, quoted; a name that is not a _claim_one
 * function (the Secret's claimFunction, the batch function, wired in by
 * mistake) is refused here rather than by PostgreSQL at the first record.
 */
function perRecordFunction(name: string): string {
  if (!name.endsWith('_claim_one')) {
    throw new Error(
      `DEDUP_CLAIM_ONE_FUNCTION=${JSON.stringify(name)}: want the per-record function <schema>.<table>_claim_one ` +
        "(the application Secret's key claimOneFunction, not claimFunction, which is the batch function)",
    );
  }
  return quoteFunctionName(name);
}
