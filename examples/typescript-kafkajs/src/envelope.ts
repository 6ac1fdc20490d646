// The project's JSON event envelope (consumer/envelope in the Go runtime):
//
//   {"eventId": "<UUID v7, canonical 36-character text>", "type": "...",
//    "occurredAt": "<RFC 3339>", ...business fields...}
//
// This decoder only checks what must hold before the id can be sent to
// PostgreSQL as a uuid: a JSON object, an "eventId" string, canonical UUID
// text. Whether the id is a UUID v7 inside the table's window is the claim
// function's verdict ('not_v7', 'outside_window'), so there is one source of
// truth for those and the Go runtime and this example agree.

/** Why a record could not be decoded; the Go runtime uses the same names. */
export type DecodeReason = 'oversized' | 'not_json' | 'missing_id' | 'invalid_uuid';

/** A decoded record, or the reason it could not be decoded. */
export type Decoded =
  | { ok: true; eventId: string; type: string; body: Record<string, unknown> }
  | { ok: false; reason: DecodeReason; detail: string };

/** Same default limit as the Go runtime (envelope.DefaultMaxBytes). */
export const MAX_BYTES = 1 << 20;

// Canonical form only (any hex case): one event has exactly one textual id.
// urn:uuid:, braces or 32 bare hex digits would be accepted by PostgreSQL's
// uuid input and make two spellings of one id.
const CANONICAL_UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/**
 * Decodes one record value. It never throws. With idHeader set, the id is
 * that header's value (the outbox relay's "eventId" header) and the value
 * only needs to be a JSON object.
 */
export function decode(value: Buffer | null, idField = 'eventId', idHeader?: { name: string; value: string | undefined }): Decoded {
  if (value === null || value.length === 0) {
    return { ok: false, reason: 'not_json', detail: 'empty value (a tombstone?)' };
  }
  if (value.length > MAX_BYTES) {
    return { ok: false, reason: 'oversized', detail: `value is ${value.length} bytes, limit ${MAX_BYTES}` };
  }
  let body: unknown;
  try {
    body = JSON.parse(value.toString('utf8'));
  } catch (e) {
    return { ok: false, reason: 'not_json', detail: (e as Error).message };
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { ok: false, reason: 'not_json', detail: 'value is not a JSON object' };
  }
  const obj = body as Record<string, unknown>;
  const id = idHeader ? idHeader.value : obj[idField];
  if (typeof id !== 'string' || id === '') {
    return { ok: false, reason: 'missing_id', detail: idHeader ? `no "${idHeader.name}" header` : `no "${idField}" string field` };
  }
  if (!CANONICAL_UUID.test(id)) {
    return { ok: false, reason: 'invalid_uuid', detail: `${JSON.stringify(id.slice(0, 64))} is not a canonical UUID` };
  }
  const type = typeof obj.type === 'string' ? obj.type : '';
  return { ok: true, eventId: id.toLowerCase(), type, body: obj };
}
