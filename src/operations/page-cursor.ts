import { createHash } from 'node:crypto';
import { SagaValidationError } from '../errors.js';
import { EARLIEST_STATE_DATE_MS, LATEST_STATE_DATE_MS } from '../saga/state-values.js';

/** Where a page ended: the last row's sort key (newest first: created_at, then saga type, then id). */
export interface PagePosition {
  /** Epoch ms, from year 1 to 9999: the created_at values a listing reads (`STORED_VALUE_INVALID` outside them). */
  readonly createdAtMs: number;
  /** The saga type of the last row ('' where the listing has one type per row table). */
  readonly sagaType: string;
  readonly id: string;
}

const VERSION = 1;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * A short digest of the position and the query's filters: a cursor is only accepted unchanged, by the query
 * that returned it. (Not a secret: it catches edits and mix-ups; every field is also checked on its own.)
 */
function fingerprint(position: readonly unknown[], filters: unknown): string {
  // A bigint correlation filter is digested as its decimal text (JSON has no bigint).
  const text = JSON.stringify([position, filters], (_key, value: unknown) => (typeof value === 'bigint' ? `${value}n` : value));
  return createHash('sha256').update(text).digest('base64url').slice(0, 16);
}

/** An opaque cursor for the page after `position`, bound to `filters`. */
export function encodeCursor(position: PagePosition, filters: unknown): string {
  const key = [position.createdAtMs, position.sagaType, position.id];
  const body = [VERSION, ...key, fingerprint(key, filters)];
  return Buffer.from(JSON.stringify(body), 'utf8').toString('base64url');
}

/**
 * Reads a cursor returned by the same query.
 * @throws SagaValidationError `CURSOR_INVALID` when it is not one: edited, truncated, or from other filters; every
 *   field is checked before it reaches SQL (a position outside years 1 to 9999 too).
 */
export function decodeCursor(cursor: unknown, filters: unknown, knownTypes: ReadonlySet<string>): PagePosition {
  const refuse = (why: string): never => {
    throw new SagaValidationError(
      'CURSOR_INVALID',
      `The page cursor ${why}: pass the nextCursor of the previous page unchanged, with the same filters, or start again without a cursor.`,
    );
  };
  if (typeof cursor !== 'string' || cursor.length === 0 || cursor.length > 1_000 || !/^[\w-]+$/.test(cursor)) {
    return refuse('is not a cursor this library returned');
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    return refuse('is not a cursor this library returned');
  }
  if (!Array.isArray(body) || body.length !== 5 || body[0] !== VERSION) return refuse('is not a cursor this library returned');
  const [, createdAtMs, sagaType, id, digest] = body as [number, unknown, unknown, unknown, unknown];
  if (
    typeof createdAtMs !== 'number' ||
    !Number.isSafeInteger(createdAtMs) ||
    // The instants a listed row can have (a row outside them is refused as it is read): the digest is not a
    // secret, so a built cursor must not reach SQL with a date the driver cannot write.
    createdAtMs < EARLIEST_STATE_DATE_MS ||
    createdAtMs > LATEST_STATE_DATE_MS ||
    typeof sagaType !== 'string' ||
    (sagaType !== '' && !knownTypes.has(sagaType)) ||
    typeof id !== 'string' ||
    !UUID.test(id)
  ) {
    return refuse('was altered');
  }
  if (digest !== fingerprint([createdAtMs, sagaType, id], filters)) return refuse('was altered, or belongs to a query with other filters');
  const position = { createdAtMs, sagaType, id };
  // Base64 text decodes leniently (trailing characters are dropped): only the exact text encoded is accepted.
  if (encodeCursor(position, filters) !== cursor) return refuse('was altered');
  return position;
}
