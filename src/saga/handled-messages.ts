import type { EntityManager } from '@mikro-orm/core';
import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { SagaValidationError } from '../errors.js';
import { deleteHandledMessagesBefore } from '../sql/handled-message-statements.js';

/** Default of `messageIds.retentionMs`: how long a handled message id is remembered, ms (7 days). */
export const DEFAULT_MESSAGE_ID_RETENTION_MS = 7 * 24 * 3_600_000;
/** Default of `purgeExpiredMessageIds({ batchSize })`: records deleted per statement. */
export const DEFAULT_PURGE_BATCH_SIZE = 1_000;

/** What {@link purgeHandledMessagesBefore} did. */
export interface PurgeResult {
  /** Records deleted. */
  readonly deleted: number;
  /** Statements run (each its own short transaction). */
  readonly batches: number;
}

// U+0000 and unpaired UTF-16 surrogates: PostgreSQL refuses the first and turns the second into U+FFFD,
// so two different ids could be stored as one.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Checks a caller's message id: a string of 1 to 200 characters (code points) without U+0000 or unpaired
 * surrogates, stored exactly as given.
 * @throws SagaValidationError `MESSAGE_ID_INVALID` otherwise, before anything is read or written.
 */
export function checkMessageId(value: unknown, sagaType: string, messageType: string): string {
  const problem =
    typeof value !== 'string'
      ? `is a ${value === null ? 'null' : typeof value}, not a string`
      : value === ''
        ? 'is empty'
        : [...value].length > COLUMN_LIMITS.messageId
          ? `is ${[...value].length} characters long, over the limit of ${COLUMN_LIMITS.messageId}`
          : value.includes('\u0000') || LONE_SURROGATE.test(value)
            ? 'contains U+0000 or an unpaired surrogate'
            : undefined;
  if (problem) {
    throw new SagaValidationError(
      'MESSAGE_ID_INVALID',
      `The message id of '${messageType}' for saga ${sagaType} ${problem}: pass the broker's message id (a string of 1 to ${COLUMN_LIMITS.messageId} characters), or none.`,
      { sagaType, messageType },
    );
  }
  return value as string;
}

/**
 * Deletes handled-message records processed before `cutoff` in batches of `batchSize`, each batch one short
 * statement of its own, so a purge never holds long locks; safe to run from several processes at once.
 */
export async function purgeHandledMessagesBefore(
  em: EntityManager,
  cutoff: Date,
  batchSize: number,
  maxBatches: number,
): Promise<PurgeResult> {
  let deleted = 0;
  let batches = 0;
  while (batches < maxBatches) {
    const count = await deleteHandledMessagesBefore(em.fork({ clear: true }), cutoff, batchSize);
    batches++;
    deleted += count;
    if (count < batchSize) break;
  }
  return { deleted, batches };
}
