import type { EntityManager } from '@mikro-orm/core';
import type { TimerOutcome } from '../entities/dispatch-states.js';
import type { DatabaseContext } from './database-context.js';
import { placeholders, queryRows, type SqlStatement } from './sql-executor.js';

// The statements a unit of work runs on its saga's timers, built from the context's names of `saga_timer`; the
// caller runs each (`runStatement`, `queryRows`) in its transaction.

/** The columns of a timer written by a unit of work. */
export interface TimerWrite {
  readonly id: string;
  readonly sagaType: string;
  readonly sagaId: string;
  readonly name: string;
  readonly step: string | null;
  readonly dueAt: Date;
  readonly messageType: string;
  readonly payloadJson: string;
  readonly calendarKey: string | null;
  readonly correlationId: string | null;
  /** The stored trace context of the unit of work that writes it (`readStoredTraceContext` reads it). */
  readonly traceContext: string | null;
  readonly token: string;
  readonly createdAt: Date;
}

/**
 * Replaces the pending timer of that name in place: new due time, message and token, attempts and lease
 * reset. A dispatcher holding the old token can no longer fire it. Replacing in place (rather than
 * delete + insert) keeps the filtered unique index satisfied inside one transaction.
 * Changes 1 row when a pending timer was replaced, 0 when there was none.
 */
export function replacePendingTimer(db: DatabaseContext, timer: TimerWrite): SqlStatement {
  const { table, column: c } = db.tables.timer;
  return {
    sql: `update ${table} set ${c.step} = ?, ${c.dueAt} = ?, ${c.availableAt} = ?, ${c.messageType} = ?, ${c.payload} = ?,
       ${c.calendarKey} = ?, ${c.correlationId} = ?, ${c.traceContext} = ?, ${c.token} = ?, ${c.lockedUntil} = null, ${c.attempts} = 0,
       ${c.lastError} = null
     where ${c.sagaType} = ? and ${c.sagaId} = ? and ${c.name} = ? and ${c.dispatchedAt} is null`,
    params: [
      timer.step,
      timer.dueAt,
      timer.dueAt,
      timer.messageType,
      timer.payloadJson,
      timer.calendarKey,
      timer.correlationId,
      timer.traceContext,
      timer.token,
      timer.sagaType,
      timer.sagaId,
      timer.name,
    ],
  };
}

/**
 * Inserts new pending timers in one statement. Two units of work inserting the same pending name collide
 * on `saga_timer_pending_name_uniq` instead of both succeeding.
 */
export function insertTimers(db: DatabaseContext, timers: readonly TimerWrite[]): SqlStatement {
  const { table, column: c } = db.tables.timer;
  const row = `(${placeholders(13)}, 0, ?)`;
  const columns = [
    c.id,
    c.sagaType,
    c.sagaId,
    c.name,
    c.step,
    c.dueAt,
    c.availableAt,
    c.messageType,
    c.payload,
    c.calendarKey,
    c.correlationId,
    c.traceContext,
    c.token,
    c.attempts,
    c.createdAt,
  ];
  return {
    sql: `insert into ${table} (${columns.join(', ')})
     values ${timers.map(() => row).join(', ')}`,
    params: timers.flatMap((t) => [
      t.id,
      t.sagaType,
      t.sagaId,
      t.name,
      t.step,
      t.dueAt,
      t.dueAt,
      t.messageType,
      t.payloadJson,
      t.calendarKey,
      t.correlationId,
      t.traceContext,
      t.token,
      t.createdAt,
    ]),
  };
}

/** `where` of one saga instance's pending timers, with `and <condition>` when given; its parameters go first. */
function pendingOf(db: DatabaseContext, condition = ''): string {
  const c = db.tables.timer.column;
  return `where ${c.sagaType} = ? and ${c.sagaId} = ? and ${c.dispatchedAt} is null${condition ? ` and ${condition}` : ''}`;
}

/** Deletes the named pending timers of one saga instance. */
export function deletePendingTimers(db: DatabaseContext, sagaType: string, sagaId: string, names: readonly string[]): SqlStatement {
  const { table, column: c } = db.tables.timer;
  return {
    sql: `delete from ${table} ${pendingOf(db, `${c.name} in (${placeholders(names.length)})`)}`,
    params: [sagaType, sagaId, ...names],
  };
}

/**
 * Locks every pending timer of one saga instance, in id order (PostgreSQL row locks; `FOR UPDATE`), so a unit
 * of work that then writes several of them (stamps the one it delivers, deletes or replaces others) takes
 * their locks in the order the dispatcher's multi-row statements do (saga, then id: lease renewal, start
 * marks), instead of one by one in the order of its plan. Without it, a renewal holding one of the rows and
 * waiting for the other could deadlock with the unit (40P01). Returns the ids it locked.
 */
export function lockPendingTimers(db: DatabaseContext, sagaType: string, sagaId: string): SqlStatement {
  const { table, column: c } = db.tables.timer;
  return { sql: `select ${c.id} from ${table} ${pendingOf(db)} order by ${c.id} for update`, params: [sagaType, sagaId] };
}

/** Deletes every pending timer of one saga instance. */
export function deleteAllPendingTimers(db: DatabaseContext, sagaType: string, sagaId: string): SqlStatement {
  return { sql: `delete from ${db.tables.timer.table} ${pendingOf(db)}`, params: [sagaType, sagaId] };
}

/** Deletes the pending step-scoped timers of one saga instance that belong to a step other than `step`. */
export function deletePendingTimersOfOtherSteps(db: DatabaseContext, sagaType: string, sagaId: string, step: string | null): SqlStatement {
  const { table, column: c } = db.tables.timer;
  return step === null
    ? { sql: `delete from ${table} ${pendingOf(db, `${c.step} is not null`)}`, params: [sagaType, sagaId] }
    : { sql: `delete from ${table} ${pendingOf(db, `${c.step} is not null and ${c.step} <> ?`)}`, params: [sagaType, sagaId, step] };
}

/** A claimed timer's stamp: its id, the token it was claimed with, the outcome and when. */
export interface TimerStamp {
  readonly id: string;
  readonly token: string;
  readonly outcome: TimerOutcome;
  readonly at: Date;
}

/** How {@link stampTimer} finds its timer besides id and token. */
export interface StampWhere {
  /** SQL without parameters added to the WHERE. */
  readonly condition?: string;
  /**
   * Says "still pending" as a statement that finds its rows by id does (`DialectAdapter.pendingById`),
   * instead of `dispatched_at is null`.
   */
  readonly pendingById?: boolean;
}

/**
 * Takes a claimed timer out of the pending set with `outcome`, only while it is still pending under the
 * token the dispatcher claimed it with. Runs in the same transaction as the state change the timer causes.
 * Changes 1 row when stamped; 0 when the timer was cancelled, replaced or fired in the meantime (stale).
 */
export function stampTimer(db: DatabaseContext, stamp: TimerStamp, where: StampWhere = {}): SqlStatement {
  const { table, column: c } = db.tables.timer;
  const pending = where.pendingById ? db.dialect.pendingById(c.dispatchedAt) : `${c.dispatchedAt} is null`;
  return {
    sql: `update ${table} set ${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.lockedUntil} = null
     where ${c.id} = ? and ${c.token} = ? and ${pending}${where.condition ? ` and ${where.condition}` : ''}`,
    params: [stamp.at, stamp.outcome, stamp.id, stamp.token],
  };
}

/** How many of the named timers of one saga instance are pending now (to tell a race from a duplicate in one plan). */
export async function countPendingTimersNamed(
  db: DatabaseContext,
  em: EntityManager,
  sagaType: string,
  sagaId: string,
  names: readonly string[],
): Promise<number> {
  const { table, column: c } = db.tables.timer;
  const rows = await queryRows<{ n: number | string }>(em, {
    sql: `select count(*) as "n" from ${table} ${pendingOf(db, `${c.name} in (${placeholders(names.length)})`)}`,
    params: [sagaType, sagaId, ...names],
  });
  return Number(rows[0]?.n ?? 0);
}
