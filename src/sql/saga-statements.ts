import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { columnOf, runStatement, tableOf } from '../orm/compat.js';

/**
 * Confirms, inside the caller's transaction, that the saga row still has the version the step decided
 * on, without changing it. The no-op UPDATE takes the row lock, so a concurrent unit of work on the same
 * saga waits, then sees the new version and retries: timer and outbox writes are never based on stale state.
 * @returns false when another unit of work changed the row first.
 */
export async function guardSagaVersion(em: EntityManager, meta: EntityMetadata, sagaId: string, version: number): Promise<boolean> {
  const table = tableOf(em, meta);
  const id = columnOf(em, meta, meta.primaryKeys[0]!);
  const column = columnOf(em, meta, 'version');
  const affected = await runStatement(em, `update ${table} set ${column} = ${column} where ${id} = ? and ${column} = ?`, [sagaId, version]);
  return affected === 1;
}
