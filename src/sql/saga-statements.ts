import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { type ColumnValue, columnOf, queryRows, runStatement, tableOf } from '../orm/index.js';
import { PENDING_BY_ID, stampTimerStatement, type TimerStamp } from './timer-statements.js';

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
  return writeSagaRow(em, meta, { sagaId, loadedVersion: version, columns: 'guard' }, lockBound);
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
  return writeSagaRow(em, meta, { sagaId, loadedVersion, columns }, lockBound);
}

async function writeSagaRow(em: EntityManager, meta: EntityMetadata, change: SagaRowChange, lockBound?: string): Promise<boolean> {
  const { sql, params } = sagaRowUpdate(em, meta, change, lockBound);
  return (await runStatement(em, sql, params)) === 1;
}

/** The statement of {@link updateSagaRow} or {@link guardSagaVersion}: it wrote the row when it changed one row. */
export function sagaRowUpdate(
  em: EntityManager,
  meta: EntityMetadata,
  change: SagaRowChange,
  lockBound?: string,
): { readonly sql: string; readonly params: unknown[] } {
  const row = sagaRowStatement(em, meta, change, lockBound);
  return { sql: withQueries(row.with, row.sql), params: row.params };
}

/** A saga row's versioned write: its changed columns, or `guard` (the row locked, its version checked, nothing changed). */
export interface SagaRowChange {
  readonly sagaId: string;
  readonly loadedVersion: number;
  readonly columns: readonly ColumnValue[] | 'guard';
}

/** What {@link writeSagaRowAndStampTimer} did. */
export interface SagaRowAndStamp {
  /** The saga row was written (false: another unit of work changed it first, and nothing was written). */
  readonly sagaRow: boolean;
  /** The timer was stamped (false: its claim was lost, or the saga row was not written). */
  readonly stamped: boolean;
}

/**
 * The saga row's write ({@link updateSagaRow} or {@link guardSagaVersion}) and the stamp of the timer the unit
 * delivers (`stampTimer`), in one statement: one round trip instead of two (PostgreSQL, whose WITH queries can be
 * UPDATEs). The stamp reads the saga row's WITH query, so PostgreSQL runs the saga row's UPDATE, and takes its row
 * lock, before it meets the timer row: the lock order of two statements one after the other. When the saga row's
 * version check fails, the stamp changes nothing either; when the timer's claim was lost, the saga row IS written,
 * and the caller must roll it back.
 */
export async function writeSagaRowAndStampTimer(
  em: EntityManager,
  meta: EntityMetadata,
  change: SagaRowChange,
  stamp: TimerStamp,
  lockBound?: string,
): Promise<SagaRowAndStamp> {
  const { sql, params } = sagaRowAndStamp(em, meta, change, stamp, lockBound);
  return readSagaRowAndStamp(await queryRows(em, sql, params));
}

/** The statement of {@link writeSagaRowAndStampTimer}; {@link readSagaRowAndStamp} reads its rows. */
export function sagaRowAndStamp(
  em: EntityManager,
  meta: EntityMetadata,
  change: SagaRowChange,
  stamp: TimerStamp,
  lockBound?: string,
): { readonly sql: string; readonly params: unknown[] } {
  const row = sagaRowStatement(em, meta, change, lockBound, 'returning 1');
  const timer = stampTimerStatement(stamp, 'exists (select 1 from "saga_row_written")', PENDING_BY_ID);
  const sql = withQueries(
    [...row.with, `"saga_row_written" as (${row.sql})`, `"saga_timer_stamped" as (${timer.sql} returning 1)`],
    'select (select count(*) from "saga_row_written")::int as "saga_rows", (select count(*) from "saga_timer_stamped")::int as "stamped"',
  );
  return { sql, params: [...row.params, ...timer.params] };
}

/** What the rows of {@link sagaRowAndStamp}'s statement say. */
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
  em: EntityManager,
  meta: EntityMetadata,
  { sagaId, loadedVersion, columns }: SagaRowChange,
  lockBound: string | undefined,
  suffix = '',
): { readonly with: string[]; readonly sql: string; readonly params: unknown[] } {
  const table = tableOf(em, meta);
  const id = columnOf(em, meta, meta.primaryKeys[0]!);
  const version = columnOf(em, meta, 'version');
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

/**
 * The most UPDATE statements {@link runUpdatesAsOne} puts in one statement. PostgreSQL 15's cost of a statement of
 * n data-modifying WITH queries grows faster than n (measured 2026-12-02 with `pg` on a 2,000-saga bench database,
 * each UPDATE one saga or timer row by primary key, medians of 11: 2.0 ms for 10, 5.3 for 20, 10.2 for 20 on one
 * table), so a group of 10 units (20 statements) goes as three statements of at most 8, about 1 ms each.
 */
const UPDATES_PER_STATEMENT = 8;

/**
 * Runs UPDATE statements (without RETURNING, without WITH queries of their own) as few statements on PostgreSQL, in
 * `em`'s transaction: at most {@link UPDATES_PER_STATEMENT} in one, each a WITH query, read in order by the outer
 * SELECT, which answers each one's row count. For a client that sends one statement per round trip (MikroORM 7's
 * kysely): 20 statements then cost three round trips. The statements of one such statement run on one snapshot: no
 * two of all of them may write the same row (PostgreSQL would apply only one of two changes to a row in one
 * statement), which the caller ensures.
 *
 * One statement is the same as its statements one after another only while nothing runs at the END of a statement:
 * PostgreSQL runs AFTER triggers there, and with them foreign keys' checks and DEFERRABLE INITIALLY IMMEDIATE unique
 * and exclusion constraints (all triggers in `pg_trigger`), once, on what every UPDATE wrote (a key one unit frees
 * and another takes would pass, where either alone fails). So each statement first reads whether any of `tables`
 * (quoted names, as in the statements) has a trigger or a rule, and writes nothing when one does (`plain` false):
 * the caller then rolls back and writes the statements another way. It reads that after locking the tables (a
 * statement locks the tables it writes before it runs), so a trigger created meanwhile is either seen or created
 * after it.
 * @returns whether the statements ran (false: a table has triggers or rules, and the transaction must be rolled
 *   back: statements before the one that saw them may have written); when they ran, one answer per statement, in
 *   order, as `runStatement` counts them.
 */
export async function runUpdatesAsOne(
  em: EntityManager,
  statements: readonly { readonly sql: string; readonly params: readonly unknown[] }[],
  tables: readonly string[],
): Promise<{ readonly plain: boolean; readonly answers: readonly { readonly affectedRows: number }[] }> {
  const answers: { readonly affectedRows: number }[] = [];
  for (let start = 0; start < statements.length; start += UPDATES_PER_STATEMENT) {
    const part = await updatesInOneStatement(em, statements.slice(start, start + UPDATES_PER_STATEMENT), tables);
    if (!part.plain) return { plain: false, answers: [] };
    answers.push(...part.answers);
  }
  return { plain: true, answers };
}

/** One statement of {@link runUpdatesAsOne}. */
async function updatesInOneStatement(
  em: EntityManager,
  statements: readonly { readonly sql: string; readonly params: readonly unknown[] }[],
  tables: readonly string[],
): Promise<{ readonly plain: boolean; readonly answers: readonly { readonly affectedRows: number }[] }> {
  const name = (index: number) => `"saga_update_${index}"`;
  const relations = `(${tables.map(() => 'to_regclass(?)').join(', ')})`;
  const plain = `"saga_update_plain" as (select not exists (select 1 from pg_catalog.pg_trigger where tgrelid in ${relations})
     and not exists (select 1 from pg_catalog.pg_rewrite where ev_class in ${relations}) as "plain")`;
  // Each UPDATE reads the check first: on a table with triggers every one of them matches no row.
  const guarded = (sql: string) => `${sql} and (select "plain" from "saga_update_plain") returning 1`;
  const queries = statements.map((statement, index) => `${name(index)} as (${guarded(statement.sql)})`);
  const counts = statements.map((_, index) => `(select count(*) from ${name(index)})::int as "n${index}"`);
  const [row] = await queryRows<Record<string, unknown>>(
    em,
    `with ${[plain, ...queries].join(',\n')}\nselect (select "plain" from "saga_update_plain") as "plain", ${counts.join(', ')}`,
    [...tables, ...tables, ...statements.flatMap((statement) => statement.params)],
  );
  return {
    plain: row?.plain === true,
    answers: statements.map((_, index) => ({ affectedRows: Number(row?.[`n${index}`]) })),
  };
}
