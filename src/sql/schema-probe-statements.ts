import type { StoredColumn, TableNames } from './database-context.js';
import type { SqlStatement } from './sql-executor.js';

// The statements that find out what a table lacks after a statement failed on it: each selects no row, and fails
// as the database fails a statement on a missing table or column.

/** Selects nothing from `names`' table: fails when the table is missing. */
export function probeTable(names: Pick<TableNames<string>, 'table'>): SqlStatement {
  return { sql: `select 1 from ${names.table} where 1 = 0`, params: [] };
}

/** Selects nothing of `column` from `names`' table: fails when the column is missing. */
export function probeColumn(names: Pick<TableNames<string>, 'table'>, column: StoredColumn): SqlStatement {
  return { sql: `select ${column.column} from ${names.table} where 1 = 0`, params: [] };
}
