import type { EntityManager } from '@mikro-orm/core';
import { queryRows, type SqlStatement } from './sql-executor.js';

/**
 * The most UPDATE statements {@link runUpdatesAsOne} puts in one statement. PostgreSQL 15's cost of a statement of
 * n data-modifying WITH queries grows faster than n (measured with `pg` on a 2,000-saga bench database,
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
  statements: readonly SqlStatement[],
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
  statements: readonly SqlStatement[],
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
  const [row] = await queryRows<Record<string, unknown>>(em, {
    sql: `with ${[plain, ...queries].join(',\n')}\nselect (select "plain" from "saga_update_plain") as "plain", ${counts.join(', ')}`,
    params: [...tables, ...tables, ...statements.flatMap((statement) => statement.params)],
  });
  return {
    plain: row?.plain === true,
    answers: statements.map((_, index) => ({ affectedRows: Number(row?.[`n${index}`]) })),
  };
}
