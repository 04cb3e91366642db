import type { SqlStatement } from './sql-executor.js';

// The statements of one unit of work inside a group transaction (same SQL on PostgreSQL and SQLite), run with
// `sendStatement`. `name` is the library's own, never input.

/** SAVEPOINT `name`. */
export function setSavepoint(name: string): SqlStatement {
  return { sql: `savepoint ${name}`, params: [] };
}

/** ROLLBACK TO SAVEPOINT `name`. */
export function rollbackToSavepoint(name: string): SqlStatement {
  return { sql: `rollback to savepoint ${name}`, params: [] };
}
