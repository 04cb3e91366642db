import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { runStatement } from './sql-executor.js';

/**
 * Confirms, inside the caller's transaction, that the saga row still has the version the step decided
 * on, without changing it. The no-op UPDATE takes the row lock, so a concurrent unit of work on the same
 * saga waits, then sees the new version and retries: timer and outbox writes are never based on stale state.
 * @returns false when another unit of work changed the row first.
 */
export async function guardSagaVersion(em: EntityManager, meta: EntityMetadata, sagaId: string, version: number): Promise<boolean> {
  const platform = em.getPlatform();
  const table = platform.quoteIdentifier(meta.schema ? `${meta.schema}.${meta.tableName}` : meta.tableName);
  const id = platform.quoteIdentifier(meta.properties[meta.primaryKeys[0]!]!.fieldNames[0]!);
  const column = platform.quoteIdentifier(meta.properties['version' as never]!.fieldNames[0]!);
  const affected = await runStatement(em, `update ${table} set ${column} = ${column} where ${id} = ? and ${column} = ?`, [sagaId, version]);
  return affected === 1;
}
