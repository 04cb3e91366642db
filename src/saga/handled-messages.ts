import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { type SagaError, SagaPersistenceError, SagaSchemaError, SagaValidationError } from '../errors.js';
import { classifyDriverError, freshFork } from '../orm/index.js';
import type { DatabaseContext } from '../sql/database-context.js';
import { deleteHandledMessagesBefore } from '../sql/handled-message-statements.js';
import { runStatement } from '../sql/sql-executor.js';
import { nameProblem } from './stored-text.js';

/** Largest `batchSize` of a purge (`purgeExpiredMessageIds`, and the operator's `purge`). */
export const MAX_PURGE_BATCH_SIZE = 100_000;

/** What `SagaRuntime.purgeExpiredMessageIds()` did. */
export interface PurgeResult {
  /** Records deleted. */
  readonly deleted: number;
  /** Statements run (each its own short transaction). */
  readonly batches: number;
}

/**
 * Checks a caller's message id: a string of 1 to 200 characters (code points) without U+0000 or unpaired
 * surrogates, stored exactly as given.
 * @throws SagaValidationError `MESSAGE_ID_INVALID` otherwise, before anything is read or written.
 */
export function checkMessageId(value: unknown, sagaType: string, messageType: string): string {
  // Counted in code points without copying the string: a 30-million-character id is refused at once.
  const problem = nameProblem(value, { maxLength: COLUMN_LIMITS.messageId });
  if (problem) {
    throw new SagaValidationError(
      'MESSAGE_ID_INVALID',
      `The message id of '${messageType}' for saga ${sagaType} ${problem}: pass the broker's message id (a string of 1 to ${COLUMN_LIMITS.messageId} characters, without U+0000 or lone surrogates), or none.`,
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
  db: DatabaseContext,
  cutoff: Date,
  batchSize: number,
  maxBatches: number,
): Promise<PurgeResult> {
  let deleted = 0;
  let batches = 0;
  while (batches < maxBatches) {
    let count: number;
    try {
      count = await runStatement(freshFork(db.em), deleteHandledMessagesBefore(db, cutoff, batchSize));
    } catch (error) {
      throw purgeFailed(error, db.tables.handledMessage.name, deleted);
    }
    batches++;
    deleted += count;
    if (count < batchSize) break;
  }
  return { deleted, batches };
}

/** A typed error for a failed purge batch: names the table and the exception class, never SQL or values. */
function purgeFailed(error: unknown, table: string, deletedBefore: number): SagaError {
  const name = error instanceof Error ? error.constructor.name : typeof error;
  const sofar = `${deletedBefore} record(s) were deleted by earlier batches; the failed batch deleted nothing`;
  if (classifyDriverError(error) === 'missing table') {
    return new SagaSchemaError(
      'SCHEMA_INVALID',
      `Purging expired message ids failed: table ${table} does not exist (${sofar}). Run the library's migrations (SAGA_MIGRATIONS from 'mikro-orm-saga/migrations', or your own generated from SAGA_ENTITIES; docs/migrations.md).`,
      { table, operation: 'delete' },
      { cause: error },
    );
  }
  return new SagaPersistenceError(
    'PERSISTENCE_FAILED',
    `Purging expired message ids failed (delete on ${table}: ${name}); ${sofar}. Run the purge again once the database answers; the driver's error is the \`cause\`.`,
    { table, operation: 'delete', deleted: deletedBefore },
    { cause: error },
  );
}
