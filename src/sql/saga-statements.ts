import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { type ColumnValue, columnOf, runStatement, tableOf } from '../orm/compat.js';

/**
 * Confirms, inside the caller's transaction, that the saga row still has the version the step decided
 * on, without changing it. The no-op UPDATE takes the row lock, so a concurrent unit of work on the same
 * saga waits, then sees the new version and retries: timer and outbox writes are never based on stale state.
 * @returns false when another unit of work changed the row first.
 */
export async function guardSagaVersion(
  em: EntityManager,
  meta: EntityMetadata,
  sagaId: string,
  version: number,
  lockBound?: string,
): Promise<boolean> {
  const table = tableOf(em, meta);
  const id = columnOf(em, meta, meta.primaryKeys[0]!);
  const column = columnOf(em, meta, 'version');
  const sql = boundUpdate(lockBound, table, (row) => ({
    set: `${column} = ${row}${column}`,
    where: `${row}${id} = ? and ${row}${column} = ?`,
  }));
  return (await runStatement(em, sql, [sagaId, version])) === 1;
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
  lockBound?: string,
): Promise<boolean> {
  const table = tableOf(em, meta);
  const id = columnOf(em, meta, meta.primaryKeys[0]!);
  const version = columnOf(em, meta, 'version');
  const assignments = columns.map(({ column }) => `${column} = ?`).join(', ');
  const params = [...columns.map(({ value }) => value), sagaId, loadedVersion];
  const sql = boundUpdate(lockBound, table, (row) => ({ set: assignments, where: `${row}${id} = ? and ${row}${version} = ?` }));
  return (await runStatement(em, sql, params)) === 1;
}

/**
 * `update <table> set ... where ...`, with `lockBound` (PostgreSQL: the SELECT that sets the transaction's
 * `lock_timeout`, without parameters) folded in as a WITH query the UPDATE joins: one statement, one round trip,
 * instead of the SELECT before it. PostgreSQL never folds a WITH query that calls a volatile function into the
 * main query; it runs it once, when the join first reads it, so the setting is in force before the UPDATE meets
 * the row, and with it its lock wait.
 * The saga table and its columns are the application's: joined, the table is aliased (a table named like the WITH
 * query would otherwise be named twice) and `clauses` (SET and WHERE, given the qualifier to put before the
 * table's columns they read) qualify them, as a column named like the WITH query's (`set_config`, `own`) would
 * otherwise be ambiguous. SET's targets are always the table's own columns: they are never qualified.
 */
function boundUpdate(
  lockBound: string | undefined,
  table: string,
  clauses: (qualifier: string) => { readonly set: string; readonly where: string },
): string {
  if (!lockBound) {
    const { set, where } = clauses('');
    return `update ${table} set ${set} where ${where}`;
  }
  const { set, where } = clauses('"saga_row".');
  return `with "saga_lock_bound" as (${lockBound}) update ${table} as "saga_row" set ${set} from "saga_lock_bound" where ${where}`;
}
