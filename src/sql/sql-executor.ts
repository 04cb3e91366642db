import type { EntityManager } from '@mikro-orm/core';
import type { SqlStatement } from '../orm/index.js';
import { executeSql } from '../orm/sql-execution.js';

// The one runner of the library's statements: each statement function builds a `SqlStatement` from the database
// context's names, and these run it on the EntityManager the caller gives (inside its transaction when it has one).
// Nothing else in the library imports the ORM's execution functions (.dependency-cruiser.cjs).

export type { SqlStatement };

/** Runs `statement` on `em` and returns the rows. */
export function queryRows<T>(em: EntityManager, { sql, params }: SqlStatement): Promise<T[]> {
  return executeSql<T[]>(em, sql, params, 'all');
}

/** Runs one INSERT, UPDATE or DELETE on `em`; the number of rows it changed (`affectedRows` on both majors). */
export async function runStatement(em: EntityManager, { sql, params }: SqlStatement): Promise<number> {
  return (await executeSql<{ affectedRows: number }>(em, sql, params, 'run')).affectedRows;
}

/** Runs one statement on `em` whose answer nobody reads (a savepoint, a lock bound). */
export async function sendStatement(em: EntityManager, { sql, params }: SqlStatement): Promise<void> {
  await executeSql(em, sql, params, 'run');
}

/** `?, ?, ?` for `count` parameters. */
export function placeholders(count: number): string {
  return Array.from({ length: count }, () => '?').join(', ');
}
