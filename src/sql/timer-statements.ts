import type { EntityManager } from '@mikro-orm/core';
import { type DialectAdapter, postgresPendingById } from '../dialect/dialect-adapter.js';
import type { TimerOutcome } from '../entities/dispatch-states.js';
import { placeholders, queryRows, runStatement } from './sql-executor.js';

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
  readonly token: string;
  readonly createdAt: Date;
}

/**
 * Replaces the pending timer of that name in place: new due time, message and token, attempts and lease
 * reset. A dispatcher holding the old token can no longer fire it. Replacing in place (rather than
 * delete + insert) keeps the filtered unique index satisfied inside one transaction.
 * @returns 1 when a pending timer was replaced, 0 when there was none.
 */
export function replacePendingTimer(em: EntityManager, timer: TimerWrite): Promise<number> {
  return runStatement(
    em,
    `update "saga_timer" set "step" = ?, "due_at" = ?, "available_at" = ?, "message_type" = ?, "payload" = ?,
       "calendar_key" = ?, "correlation_id" = ?, "token" = ?, "locked_until" = null, "attempts" = 0, "last_error" = null
     where "saga_type" = ? and "saga_id" = ? and "name" = ? and "dispatched_at" is null`,
    [
      timer.step,
      timer.dueAt,
      timer.dueAt,
      timer.messageType,
      timer.payloadJson,
      timer.calendarKey,
      timer.correlationId,
      timer.token,
      timer.sagaType,
      timer.sagaId,
      timer.name,
    ],
  );
}

/**
 * Inserts new pending timers in one statement. Two units of work inserting the same pending name collide
 * on `saga_timer_pending_name_uniq` instead of both succeeding.
 */
export function insertTimers(em: EntityManager, timers: readonly TimerWrite[]): Promise<number> {
  const row = `(${placeholders(12)}, 0, ?)`;
  return runStatement(
    em,
    `insert into "saga_timer" ("id", "saga_type", "saga_id", "name", "step", "due_at", "available_at", "message_type",
       "payload", "calendar_key", "correlation_id", "token", "attempts", "created_at")
     values ${timers.map(() => row).join(', ')}`,
    timers.flatMap((t) => [
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
      t.token,
      t.createdAt,
    ]),
  );
}

/** Deletes the named pending timers of one saga instance. */
export function deletePendingTimers(em: EntityManager, sagaType: string, sagaId: string, names: readonly string[]): Promise<number> {
  return runStatement(
    em,
    `delete from "saga_timer" where "saga_type" = ? and "saga_id" = ? and "dispatched_at" is null and "name" in (${placeholders(names.length)})`,
    [sagaType, sagaId, ...names],
  );
}

/**
 * Locks every pending timer of one saga instance, in id order (PostgreSQL row locks; `FOR UPDATE`), so a unit
 * of work that then writes several of them (stamps the one it delivers, deletes or replaces others) takes
 * their locks in the order the dispatcher's multi-row statements do (saga, then id: lease renewal, start
 * marks), instead of one by one in the order of its plan. Without it, a renewal holding one of the rows and
 * waiting for the other could deadlock with the unit (40P01).
 * @returns how many rows it locked.
 */
export async function lockPendingTimers(em: EntityManager, sagaType: string, sagaId: string): Promise<number> {
  const rows = await queryRows<{ id: string }>(
    em,
    `select "id" from "saga_timer" where "saga_type" = ? and "saga_id" = ? and "dispatched_at" is null order by "id" for update`,
    [sagaType, sagaId],
  );
  return rows.length;
}

/** Deletes every pending timer of one saga instance. */
export function deleteAllPendingTimers(em: EntityManager, sagaType: string, sagaId: string): Promise<number> {
  return runStatement(em, `delete from "saga_timer" where "saga_type" = ? and "saga_id" = ? and "dispatched_at" is null`, [
    sagaType,
    sagaId,
  ]);
}

/** Deletes the pending step-scoped timers of one saga instance that belong to a step other than `step`. */
export function deletePendingTimersOfOtherSteps(em: EntityManager, sagaType: string, sagaId: string, step: string | null): Promise<number> {
  return step === null
    ? runStatement(
        em,
        `delete from "saga_timer" where "saga_type" = ? and "saga_id" = ? and "dispatched_at" is null and "step" is not null`,
        [sagaType, sagaId],
      )
    : runStatement(
        em,
        `delete from "saga_timer" where "saga_type" = ? and "saga_id" = ? and "dispatched_at" is null and "step" is not null and "step" <> ?`,
        [sagaType, sagaId, step],
      );
}

/**
 * Takes a claimed timer out of the pending set with `outcome`, only while it is still pending under the
 * token the dispatcher claimed it with. Runs in the same transaction as the state change the timer causes.
 * @returns 1 when stamped; 0 when the timer was cancelled, replaced or fired in the meantime (stale).
 */
export function stampTimer(em: EntityManager, stamp: TimerStamp): Promise<number> {
  const { sql, params } = stampTimerStatement(stamp);
  return runStatement(em, sql, params);
}

/** A claimed timer's stamp: its id, the token it was claimed with, the outcome and when. */
export interface TimerStamp {
  readonly id: string;
  readonly token: string;
  readonly outcome: TimerOutcome;
  readonly at: Date;
}

/** "Still pending" for a PostgreSQL-only statement that finds its timer by id (see {@link DialectAdapter.pendingById}). */
export const PENDING_BY_ID = postgresPendingById('"dispatched_at"');

/**
 * The UPDATE of {@link stampTimer}, with `condition` (SQL without parameters) added to its WHERE when given.
 * `pending` is how the WHERE says the timer is still pending (default `"dispatched_at" is null`).
 */
export function stampTimerStatement(
  stamp: TimerStamp,
  condition?: string,
  pending = '"dispatched_at" is null',
): { readonly sql: string; readonly params: unknown[] } {
  return {
    sql: `update "saga_timer" set "dispatched_at" = ?, "outcome" = ?, "locked_until" = null
     where "id" = ? and "token" = ? and ${pending}${condition ? ` and ${condition}` : ''}`,
    params: [stamp.at, stamp.outcome, stamp.id, stamp.token],
  };
}

/** How many of the named timers of one saga instance are pending now (to tell a race from a duplicate in one plan). */
export async function countPendingTimersNamed(
  em: EntityManager,
  sagaType: string,
  sagaId: string,
  names: readonly string[],
): Promise<number> {
  const rows = await queryRows<{ n: number | string }>(
    em,
    `select count(*) as "n" from "saga_timer" where "saga_type" = ? and "saga_id" = ? and "dispatched_at" is null and "name" in (${placeholders(names.length)})`,
    [sagaType, sagaId, ...names],
  );
  return Number(rows[0]?.n ?? 0);
}
