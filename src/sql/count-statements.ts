import type { DatabaseContext } from './database-context.js';
import { DISPATCH_TABLES, type DispatchTable, dispatchTableNames } from './dispatch-tables.js';
import type { SqlStatement } from './sql-executor.js';

// Counts an operator (and a metrics backend) reads, each one indexed query: they run while the dispatcher works,
// on tables that may hold millions of rows of history.

/** A saga table's quoted names as the counts need them. */
export interface ActiveRowsTable {
  readonly table: string;
  readonly column: { readonly completedAt: string };
}

/**
 * The count of a saga table's active rows: `completed_at is null` is the condition of its partial active-row index
 * (`<table>_completed_at_index`), which both databases then read instead of the table.
 */
export function countActiveRows(saga: ActiveRowsTable): string {
  return `select count(*) from ${saga.table} where ${saga.column.completedAt} is null`;
}

/**
 * The count of `table`'s due rows not yet delivered (`available_at <= ?`, pending, leased or not): a range of its
 * claim index (`(available_at, id) where dispatched_at is null`), read without the table. One parameter: now.
 */
function countDueBacklog(db: DatabaseContext, table: DispatchTable): string {
  const { table: name, column: c } = dispatchTableNames(db, table);
  return `select count(*) from ${name} where ${c.dispatchedAt} is null and ${c.availableAt} <= ?`;
}

/**
 * The gauges' reading in one statement (one round trip, one pooled connection for its length): each saga table's
 * active rows (columns `s0`, `s1`, ... in the order of `sagas`), and the timer, outbox and staged-delivery backlogs at
 * `now` (`timers`, `outbox`, `inbox`). A staged delivery held behind its saga's first one counts: it is a delivery to make.
 */
export function readGauges(db: DatabaseContext, sagas: readonly ActiveRowsTable[], now: Date): SqlStatement {
  const columns = [
    `(${countDueBacklog(db, DISPATCH_TABLES.timer)}) as "timers"`,
    `(${countDueBacklog(db, DISPATCH_TABLES.outbox)}) as "outbox"`,
    `(${countDueBacklog(db, DISPATCH_TABLES.inbox)}) as "inbox"`,
    ...sagas.map((saga, i) => `(${countActiveRows(saga)}) as "s${i}"`),
  ];
  return { sql: `select ${columns.join(', ')}`, params: [now, now, now] };
}
