import type { EntityManager } from '@mikro-orm/core';
import { OUTBOX_OUTCOMES, TIMER_OUTCOMES } from '../entities/dispatch-states.js';
import { queryRows, runStatement } from './sql-executor.js';

/** The two tables the dispatcher drains; they share their dispatch columns. */
export const DISPATCH_TABLES = { timer: 'saga_timer', outbox: 'saga_outbox' } as const;
export type DispatchTable = (typeof DISPATCH_TABLES)[keyof typeof DISPATCH_TABLES];

/** Columns a claim returns, per table. */
const CLAIMED_COLUMNS: Record<DispatchTable, string> = {
  saga_timer:
    '"id", "saga_type", "saga_id", "name", "due_at", "available_at", "message_type", "payload", "correlation_id", "token", "attempts", "last_error"',
  saga_outbox:
    '"id", "saga_type", "saga_id", "message_type", "payload", "headers", "correlation_id", "available_at", "token", "attempts", "last_error", "created_at"',
};

const DUE = `"dispatched_at" is null and "available_at" <= ? and ("locked_until" is null or "locked_until" <= ?)`;

/** The `last_error` a claim records when it takes over a row whose previous claim expired. */
export const LEASE_EXPIRED_ERROR = 'LeaseExpired: the dispatcher that claimed it stopped before finishing (crash or kill)';

// A due row that still has a `locked_until` was claimed and never finished: every way a delivery ends
// (fired, failed, released) clears it. Taking such a row over counts the lost delivery as a failed attempt,
// so a message that kills every process delivering it is dead-lettered instead of retried forever.
const CLAIM_COUNTS_LOST_LEASE = `"attempts" = "attempts" + (case when "locked_until" is not null then 1 else 0 end),
       "last_error" = case when "locked_until" is not null then '${LEASE_EXPIRED_ERROR}' else "last_error" end`;

/**
 * PostgreSQL: claims up to `limit` due rows in one statement. `FOR UPDATE SKIP LOCKED` lets concurrent
 * dispatchers take disjoint batches without waiting on each other; every claimed row gets a new token.
 */
export function claimDueRowsSkipLocked(em: EntityManager, table: DispatchTable, now: Date, leaseUntil: Date, limit: number) {
  return queryRows<Record<string, unknown>>(
    em,
    `update "${table}" set "token" = gen_random_uuid(), "locked_until" = ?, ${CLAIM_COUNTS_LOST_LEASE}
     where "id" in (select "id" from "${table}" where ${DUE} order by "available_at", "id" limit ? for update skip locked)
     returning ${CLAIMED_COLUMNS[table]}`,
    [leaseUntil, now, now, limit],
  );
}

/** Portable claim, step 1: the ids and tokens of up to `limit` due rows, oldest first. */
export function selectDueRows(em: EntityManager, table: DispatchTable, now: Date, limit: number) {
  return queryRows<{ id: string; token: string }>(
    em,
    `select "id", "token" from "${table}" where ${DUE} order by "available_at", "id" limit ?`,
    [now, now, limit],
  );
}

/**
 * Portable claim, step 2: takes one row by its concurrency token. Another dispatcher that read the same
 * token first has already replaced it, so this affects no row and returns nothing.
 */
export function claimRowByToken(em: EntityManager, table: DispatchTable, id: string, token: string, newToken: string, leaseUntil: Date) {
  return queryRows<Record<string, unknown>>(
    em,
    `update "${table}" set "token" = ?, "locked_until" = ?, ${CLAIM_COUNTS_LOST_LEASE}
     where "id" = ? and "token" = ? and "dispatched_at" is null
     returning ${CLAIMED_COLUMNS[table]}`,
    [newToken, leaseUntil, id, token],
  );
}

/** Gives a claimed row back before its lease ends (graceful stop); it is due again at once. */
export function releaseClaim(em: EntityManager, table: DispatchTable, id: string, token: string): Promise<number> {
  return runStatement(em, `update "${table}" set "locked_until" = null where "id" = ? and "token" = ? and "dispatched_at" is null`, [
    id,
    token,
  ]);
}

/**
 * Counts a failed delivery: the row stays pending, `available_at` moves to `retryAt`, and a new token
 * makes a delivery still in flight (one that timed out) unable to commit.
 */
export function recordFailure(
  em: EntityManager,
  table: DispatchTable,
  claim: { id: string; token: string },
  error: string,
  retryAt: Date,
  newToken: string,
): Promise<number> {
  return runStatement(
    em,
    `update "${table}" set "attempts" = "attempts" + 1, "last_error" = ?, "available_at" = ?, "locked_until" = null, "token" = ?
     where "id" = ? and "token" = ? and "dispatched_at" is null`,
    [error, retryAt, newToken, claim.id, claim.token],
  );
}

/**
 * Retires a row after its last allowed failure: kept, stamped dead-lettered with the reason, out of the
 * due set; for a timer the name is free again (the unique index covers pending rows only).
 * `countsAnAttempt` is false when the last failure was already counted (a lost lease, counted by the claim).
 */
export function deadLetter(
  em: EntityManager,
  table: DispatchTable,
  claim: { id: string; token: string },
  error: string,
  reason: string,
  now: Date,
  newToken: string,
  countsAnAttempt = true,
): Promise<number> {
  const outcome = table === DISPATCH_TABLES.timer ? TIMER_OUTCOMES.DEAD_LETTERED : OUTBOX_OUTCOMES.DEAD_LETTERED;
  return runStatement(
    em,
    `update "${table}" set "attempts" = "attempts" + ${countsAnAttempt ? 1 : 0}, "last_error" = ?, "locked_until" = null, "token" = ?,
       "dispatched_at" = ?, "outcome" = ?, "dead_lettered_at" = ?, "dead_letter_reason" = ?
     where "id" = ? and "token" = ? and "dispatched_at" is null`,
    [error, newToken, now, outcome, now, reason, claim.id, claim.token],
  );
}

/** Stamps an outbox row published, only while the claim token still matches. */
export function markPublished(em: EntityManager, claim: { id: string; token: string }, now: Date): Promise<number> {
  return runStatement(
    em,
    `update "saga_outbox" set "dispatched_at" = ?, "outcome" = ?, "locked_until" = null
     where "id" = ? and "token" = ? and "dispatched_at" is null`,
    [now, OUTBOX_OUTCOMES.PUBLISHED, claim.id, claim.token],
  );
}

// A never-attempted timer has available_at = due_at (insert and replace set both, attempts = 0), so the
// backlog filters below test available_at and use the partial due index. A claimed timer keeps its
// locked_until until its delivery ends, so one whose dispatcher died is not mistaken for backlog either.
const NEVER_ATTEMPTED = `"dispatched_at" is null and "attempts" = 0 and "locked_until" is null`;

/**
 * Catch-up `skip-beyond-max-age`: stamps `missed` every backlog timer (never attempted, never claimed) that
 * is overdue by more than the max age at `now`.
 */
export function missTimersOverdueBefore(em: EntityManager, overdueBefore: Date, now: Date) {
  return queryRows<{ saga_type: string }>(
    em,
    `update "saga_timer" set "dispatched_at" = ?, "outcome" = ?, "locked_until" = null
     where ${NEVER_ATTEMPTED} and "available_at" < ?
     returning "saga_type"`,
    [now, TIMER_OUTCOMES.MISSED, overdueBefore],
  );
}

/**
 * Catch-up `fire-latest-per-saga`: stamps `missed` every backlog timer (never attempted, due before
 * `backlogBefore`) that has a newer due timer pending on the same saga instance; the newest one fires.
 */
export function missTimersSupersededInBacklog(em: EntityManager, backlogBefore: Date, now: Date) {
  return queryRows<{ saga_type: string }>(
    em,
    `update "saga_timer" set "dispatched_at" = ?, "outcome" = ?, "locked_until" = null
     where ${NEVER_ATTEMPTED} and "available_at" < ?
       and exists (select 1 from "saga_timer" as "newer"
         where "newer"."saga_type" = "saga_timer"."saga_type" and "newer"."saga_id" = "saga_timer"."saga_id"
           and "newer"."dispatched_at" is null and "newer"."due_at" <= ?
           and ("newer"."due_at" > "saga_timer"."due_at"
             or ("newer"."due_at" = "saga_timer"."due_at" and "newer"."id" > "saga_timer"."id")))
     returning "saga_type"`,
    [now, TIMER_OUTCOMES.MISSED, backlogBefore, now],
  );
}

/** Due pending rows at `now` (for the drain helpers' report). */
export async function countDueRows(em: EntityManager, table: DispatchTable, now: Date): Promise<number> {
  const rows = await queryRows<{ n: number | string }>(em, `select count(*) as "n" from "${table}" where ${DUE}`, [now, now]);
  return Number(rows[0]?.n ?? 0);
}
