import { TIMER_OUTCOMES } from '../entities/dispatch-states.js';
import type { DatabaseContext } from './database-context.js';
import { lockedInSagaOrder } from './dispatch-tables.js';
import { queryRows } from './sql-executor.js';

// The dispatcher's catch-up policies for a backlog of overdue timers (dispatcher option `catchUp`).
// A never-attempted timer has available_at = due_at (insert and replace set both, attempts = 0), so the
// backlog filters below test available_at and use the partial due index. A claimed timer keeps its
// locked_until until its delivery ends, so one whose dispatcher died is not mistaken for backlog either.

/** "In the backlog": pending, never attempted, never claimed. */
function neverAttempted(db: DatabaseContext): string {
  const c = db.tables.timer.column;
  return `${c.dispatchedAt} is null and ${c.attempts} = 0 and ${c.lockedUntil} is null`;
}

/**
 * Catch-up `skip-beyond-max-age`: stamps `missed` every backlog timer (never attempted, never claimed) that
 * is overdue by more than the max age at `now`.
 * @returns the saga type of each timer stamped.
 */
export function missTimersOverdueBefore(db: DatabaseContext, overdueBefore: Date, now: Date) {
  const { table, column: c } = db.tables.timer;
  return queryRows<{ sagaType: string }>(db.autocommit, {
    sql: `update ${table} set ${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.lockedUntil} = null
     where ${inSagaOrder(db, `${neverAttempted(db)} and ${c.availableAt} < ?`)}
     returning ${c.sagaType} as "sagaType"`,
    params: [now, TIMER_OUTCOMES.MISSED, overdueBefore],
  });
}

/**
 * Catch-up `fire-latest-per-saga`: stamps `missed` every backlog timer (never attempted, due before
 * `backlogBefore`) that has a newer due timer pending on the same saga instance; the newest one fires.
 * @returns the saga type of each timer stamped.
 */
export function missTimersSupersededInBacklog(db: DatabaseContext, backlogBefore: Date, now: Date) {
  const { table, column: c } = db.tables.timer;
  const newer = (column: string) => `"newer".${column}`;
  const self = (column: string) => `${table}.${column}`;
  return queryRows<{ sagaType: string }>(db.autocommit, {
    sql: `update ${table} set ${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.lockedUntil} = null
     where ${inSagaOrder(
       db,
       `${neverAttempted(db)} and ${c.availableAt} < ?
       and exists (select 1 from ${table} as "newer"
         where ${newer(c.sagaType)} = ${self(c.sagaType)} and ${newer(c.sagaId)} = ${self(c.sagaId)}
           and ${newer(c.dispatchedAt)} is null and ${newer(c.dueAt)} <= ?
           and (${newer(c.dueAt)} > ${self(c.dueAt)}
             or (${newer(c.dueAt)} = ${self(c.dueAt)} and ${newer(c.id)} > ${self(c.id)})))`,
     )}
     returning ${c.sagaType} as "sagaType"`,
    params: [now, TIMER_OUTCOMES.MISSED, backlogBefore, now],
  });
}

/**
 * `condition` on the timers, or on PostgreSQL: the timers matching it, locked in saga order first (see
 * `lockedInSagaOrder`), skipping a timer another transaction holds locked: waiting for it would hold the pass, and the
 * other timers the statement locked, until that transaction ended. A skipped timer stays pending: the claim skips it
 * too while it is locked, and the next pass's catch-up takes it.
 */
function inSagaOrder(db: DatabaseContext, condition: string): string {
  const { table, column: c } = db.tables.timer;
  return db.dialect.supportsSkipLocked ? `${c.id} in (${lockedInSagaOrder({ ...c, saga: c.sagaId }, table, condition, true)})` : condition;
}
