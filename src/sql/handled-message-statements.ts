import type { EntityManager } from '@mikro-orm/core';
import { queryRows, runStatement } from './sql-executor.js';

/** The table of handled message ids. */
export const HANDLED_MESSAGE_TABLE = 'saga_handled_message';

/** A message id recorded by a unit of work. */
export interface HandledMessageWrite {
  readonly id: string;
  readonly sagaType: string;
  readonly sagaId: string;
  readonly messageId: string;
  /** The saga's version after the unit of work. */
  readonly version: number;
  readonly processedAt: Date;
}

/**
 * The version a saga instance reached when it handled `messageId`, or undefined when it has not handled it
 * (or its record was purged).
 */
export async function findHandledMessage(
  em: EntityManager,
  sagaType: string,
  sagaId: string,
  messageId: string,
): Promise<{ readonly version: number } | undefined> {
  const rows = await queryRows<{ version: number | string }>(
    em,
    `select "version" from "saga_handled_message" where "saga_type" = ? and "saga_id" = ? and "message_id" = ?`,
    [sagaType, sagaId, messageId],
  );
  return rows[0] && { version: Number(rows[0].version) };
}

/**
 * Records a handled message id inside the unit of work's transaction. Two units of work handling the same id
 * for the same instance collide on `saga_handled_message_uniq`; the loser re-reads and finds the record.
 */
export function insertHandledMessage(em: EntityManager, row: HandledMessageWrite): Promise<number> {
  return runStatement(
    em,
    `insert into "saga_handled_message" ("id", "saga_type", "saga_id", "message_id", "version", "processed_at") values (?, ?, ?, ?, ?, ?)`,
    [row.id, row.sagaType, row.sagaId, row.messageId, row.version, row.processedAt],
  );
}

/**
 * Deletes up to `limit` records processed before `cutoff`, oldest first, in one short statement.
 * @returns the number of records deleted; fewer than `limit` means none older than `cutoff` remain.
 */
export function deleteHandledMessagesBefore(em: EntityManager, cutoff: Date, limit: number): Promise<number> {
  return runStatement(
    em,
    `delete from "saga_handled_message" where "id" in
       (select "id" from "saga_handled_message" where "processed_at" < ? order by "processed_at" limit ?)`,
    [cutoff, limit],
  );
}
