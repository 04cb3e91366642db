import type { EntityManager } from '@mikro-orm/core';
import { executeSql } from '../orm/index.js';

/** The savepoint statements of one unit of work inside a group transaction (same SQL on PostgreSQL and SQLite). */
export const SAVEPOINT_SQL = {
  set: (name: string) => `savepoint ${name}`,
  rollbackTo: (name: string) => `rollback to savepoint ${name}`,
} as const;

/** Runs one savepoint statement (`SAVEPOINT_SQL`) in `em`'s transaction. `name` is the library's own, never input. */
export async function runSavepointStatement(em: EntityManager, sql: string): Promise<void> {
  await executeSql(em, sql, [], 'run');
}
