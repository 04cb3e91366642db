import type { EntityManager } from '@mikro-orm/core';
import type { DatabaseContext } from './database-context.js';
import { queryRows, type SqlStatement } from './sql-executor.js';

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
  db: DatabaseContext,
  em: EntityManager,
  sagaType: string,
  sagaId: string,
  messageId: string,
): Promise<{ readonly version: number } | undefined> {
  const { table, column: c } = db.tables.handledMessage;
  const rows = await queryRows<{ version: number | string }>(em, {
    sql: `select ${c.version} as "version" from ${table} where ${c.sagaType} = ? and ${c.sagaId} = ? and ${c.messageId} = ?`,
    params: [sagaType, sagaId, messageId],
  });
  return rows[0] && { version: Number(rows[0].version) };
}

/**
 * Records a handled message id inside the unit of work's transaction. Two units of work handling the same id
 * for the same instance collide on `saga_handled_message_uniq`; the loser re-reads and finds the record.
 */
export function insertHandledMessage(db: DatabaseContext, row: HandledMessageWrite): SqlStatement {
  const { table, column: c } = db.tables.handledMessage;
  return {
    sql: `insert into ${table} (${c.id}, ${c.sagaType}, ${c.sagaId}, ${c.messageId}, ${c.version}, ${c.processedAt}) values (?, ?, ?, ?, ?, ?)`,
    params: [row.id, row.sagaType, row.sagaId, row.messageId, row.version, row.processedAt],
  };
}

/**
 * Deletes up to `limit` records processed before `cutoff`, oldest first, in one short statement. Fewer rows
 * deleted than `limit` means none older than `cutoff` remain.
 */
export function deleteHandledMessagesBefore(db: DatabaseContext, cutoff: Date, limit: number): SqlStatement {
  const { table, column: c } = db.tables.handledMessage;
  return {
    sql: `delete from ${table} where ${c.id} in
       (select ${c.id} from ${table} where ${c.processedAt} < ? order by ${c.processedAt} limit ?)`,
    params: [cutoff, limit],
  };
}
