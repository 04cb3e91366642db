import type { EntityManager } from '@mikro-orm/core';
import { executeSql, type SqlStatement } from '../orm/index.js';

// The one runner of the library's statements: each statement function builds a `SqlStatement` from the database
// context's names, and these run it on the EntityManager the caller gives (inside its transaction when it has one).

export type { SqlStatement };

/** Runs `statement` on `em` and returns the rows. */
export function queryRows<T>(em: EntityManager, { sql, params }: SqlStatement): Promise<T[]> {
  return executeSql<T[]>(em, sql, params, 'all');
}

/** Runs one INSERT, UPDATE or DELETE on `em`; the number of rows it changed (`affectedRows` on both majors). */
export async function runStatement(em: EntityManager, { sql, params }: SqlStatement): Promise<number> {
  return (await executeSql<{ affectedRows: number }>(em, sql, params, 'run')).affectedRows;
}

/** `?, ?, ?` for `count` parameters. */
export function placeholders(count: number): string {
  return Array.from({ length: count }, () => '?').join(', ');
}
