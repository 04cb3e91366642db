import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { type ColumnValue, columnOf, runStatement, tableOf } from '../orm/compat.js';

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

/**
 * Writes the changed columns of a saga row (see `plainRowUpdate`) in one UPDATE guarded by the version the unit
 * of work read, inside the caller's transaction: what MikroORM's flush sends for the entity, without building it
 * through MikroORM's query builder.
 * @returns false when another unit of work changed the row first.
 */
export async function updateSagaRow(
  em: EntityManager,
  meta: EntityMetadata,
  sagaId: string,
  loadedVersion: number,
  columns: readonly ColumnValue[],
): Promise<boolean> {
  const table = tableOf(em, meta);
  const id = columnOf(em, meta, meta.primaryKeys[0]!);
  const version = columnOf(em, meta, 'version');
  const assignments = columns.map(({ column }) => `${column} = ?`).join(', ');
  const params = [...columns.map(({ value }) => value), sagaId, loadedVersion];
  return (await runStatement(em, `update ${table} set ${assignments} where ${id} = ? and ${version} = ?`, params)) === 1;
}
