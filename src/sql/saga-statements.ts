import type { EntityMetadata } from '@mikro-orm/core';
import type { ColumnValue } from '../orm/index.js';
import type { DatabaseContext } from './database-context.js';
import type { SqlStatement } from './sql-executor.js';
import { stampTimer, type TimerStamp } from './timer-statements.js';

// The statements a unit of work runs on its saga's row, in the saga's own table (`meta`), whose names the context
// read from MikroORM's metadata.

/** A saga row's versioned write: its changed columns, or `guard` (the row locked, its version checked, nothing changed). */
export interface SagaRowChange {
  readonly sagaId: string;
  readonly loadedVersion: number;
  readonly columns: readonly ColumnValue[] | 'guard';
}

/**
 * Writes the changed columns of a saga row (see `plainRowUpdate`) in one UPDATE guarded by the version the unit
 * of work read, inside the caller's transaction: what MikroORM's flush sends for the entity, without building it
 * through MikroORM's query builder. With `guard` columns it confirms that the row still has the version the step
 * decided on, without changing it: the no-op UPDATE takes the row lock, so a concurrent unit of work on the same
 * saga waits, then sees the new version and retries, and timer and outbox writes are never based on stale state.
 * It wrote the row when it changed one row; another unit of work changed the row first when it changed none.
 */
export function updateSagaRow(db: DatabaseContext, meta: EntityMetadata, change: SagaRowChange, lockBound?: string): SqlStatement {
  const row = sagaRowStatement(db, meta, change, lockBound);
  return { sql: withQueries(row.with, row.sql), params: row.params };
}

/** What {@link updateSagaRowAndStampTimer} did. */
export interface SagaRowAndStamp {
  /** The saga row was written (false: another unit of work changed it first, and nothing was written). */
  readonly sagaRow: boolean;
  /** The timer was stamped (false: its claim was lost, or the saga row was not written). */
  readonly stamped: boolean;
}

/**
 * The saga row's write ({@link updateSagaRow}) and the stamp of the timer the unit delivers (`stampTimer`), in one
 * statement: one round trip instead of two (PostgreSQL, whose WITH queries can be UPDATEs). The stamp reads the saga
 * row's WITH query, so PostgreSQL runs the saga row's UPDATE, and takes its row lock, before it meets the timer row:
 * the lock order of two statements one after the other. When the saga row's version check fails, the stamp changes
 * nothing either; when the timer's claim was lost, the saga row IS written, and the caller must roll it back.
 * {@link readSagaRowAndStamp} reads its rows.
 */
export function updateSagaRowAndStampTimer(
  db: DatabaseContext,
  meta: EntityMetadata,
  change: SagaRowChange,
  stamp: TimerStamp,
  lockBound?: string,
): SqlStatement {
  const row = sagaRowStatement(db, meta, change, lockBound, 'returning 1');
  const timer = stampTimer(db, stamp, { condition: 'exists (select 1 from "saga_row_written")', pendingById: true });
  const sql = withQueries(
    [...row.with, `"saga_row_written" as (${row.sql})`, `"saga_timer_stamped" as (${timer.sql} returning 1)`],
    'select (select count(*) from "saga_row_written")::int as "saga_rows", (select count(*) from "saga_timer_stamped")::int as "stamped"',
  );
  return { sql, params: [...row.params, ...timer.params] };
}

/** What the rows of {@link updateSagaRowAndStampTimer}'s statement say. */
export function readSagaRowAndStamp(rows: readonly unknown[]): SagaRowAndStamp {
  const counts = rows[0] as { saga_rows?: number; stamped?: number } | undefined;
  return { sagaRow: counts?.saga_rows === 1, stamped: counts?.stamped === 1 };
}

/**
 * The saga row's versioned UPDATE, `suffix` (a RETURNING clause) after it, and the WITH queries it reads. `lockBound`
 * (PostgreSQL: the SELECT that sets the transaction's `lock_timeout`, without parameters) is folded in as a WITH
 * query the UPDATE joins: one statement, one round trip, instead of the SELECT before it. PostgreSQL never folds a
 * WITH query that calls a volatile function into the main query; it runs it once, when the join first reads it, so
 * the setting is in force before the UPDATE meets the row, and with it its lock wait.
 * The saga table and its columns are the application's: joined, the table is aliased (a table named like the WITH
 * query would otherwise be named twice) and SET and WHERE qualify the table's columns they read, as a column named
 * like the WITH query's (`set_config`, `own`) would otherwise be ambiguous. SET's targets are always the table's own
 * columns: they are never qualified.
 */
function sagaRowStatement(
  db: DatabaseContext,
  meta: EntityMetadata,
  { sagaId, loadedVersion, columns }: SagaRowChange,
  lockBound: string | undefined,
  suffix = '',
): { readonly with: string[]; readonly sql: string; readonly params: unknown[] } {
  const { table, primaryKey: id, column } = db.tables.saga(meta);
  const version = column.version;
  const row = lockBound ? '"saga_row".' : '';
  const set = columns === 'guard' ? `${version} = ${row}${version}` : columns.map(({ column }) => `${column} = ?`).join(', ');
  const params = [...(columns === 'guard' ? [] : columns.map(({ value }) => value)), sagaId, loadedVersion];
  const where = `${row}${id} = ? and ${row}${version} = ?${suffix ? ` ${suffix}` : ''}`;
  if (!lockBound) return { with: [], sql: `update ${table} set ${set} where ${where}`, params };
  return {
    with: [`"saga_lock_bound" as (${lockBound})`],
    sql: `update ${table} as "saga_row" set ${set} from "saga_lock_bound" where ${where}`,
    params,
  };
}

/** `sql` with the WITH queries it reads. */
function withQueries(queries: readonly string[], sql: string): string {
  return queries.length > 0 ? `with ${queries.join(', ')} ${sql}` : sql;
}
