import { INBOX_OUTCOMES, OUTBOX_OUTCOMES, TIMER_OUTCOMES } from '../entities/dispatch-states.js';
import { storableText } from '../text/storable-text.js';
import { type ClaimedRowsAnswer, updateClaimedRows, updateClaimedRowsNotWaiting } from './claimed-row-updates.js';
import type { DatabaseContext } from './database-context.js';
import { type Claim, DISPATCH_TABLES, type DispatchTable, dispatchTableNames, ERROR_TEXT_LIMIT } from './dispatch-tables.js';
import { runStatement, type SqlStatement } from './sql-executor.js';

// What the dispatcher writes on the rows it claimed, each write checked against the claim's token, in
// autocommit statements on the context's own fork.

/**
 * Records that the deliveries under `claims` start now, in one statement before their steps or publishers
 * run (the dispatcher gathers the deliveries starting together): from here on a lost lease is their fault. Does not
 * wait for a row another transaction holds locked (`updateClaimedRowsNotWaiting`): a statement that waited would hold
 * every other row it carries, and the start marks queued behind it, until that transaction ended. Such a row is
 * reported busy; the dispatcher then waits for it alone ({@link markDeliveryStartedWaiting}).
 * @returns the ids marked and those busy; a claim missing from both was lost (another dispatcher took the row, or it
 * left the pending set).
 */
export function markDeliveriesStarted(
  db: DatabaseContext,
  table: DispatchTable,
  claims: readonly Claim[],
  now: Date,
): Promise<ClaimedRowsAnswer> {
  const { column: c } = dispatchTableNames(db, table);
  return updateClaimedRowsNotWaiting(db, table, claims, { set: `${c.deliveryStartedAt} = ?`, params: [now] });
}

/**
 * Records that the delivery under `claim` starts now, waiting for the row's lock as long as the connection allows:
 * for a row another transaction holds locked when its delivery is next in its saga's lane. The saga's later rows wait
 * behind it, so the messages of one saga go out in order within a pass; no other row waits for it.
 * @returns whether the row was marked (false: the claim was lost).
 */
export async function markDeliveryStartedWaiting(db: DatabaseContext, table: DispatchTable, claim: Claim, now: Date): Promise<boolean> {
  const { column: c } = dispatchTableNames(db, table);
  return (await updateClaimedRows(db, table, [claim], { set: `${c.deliveryStartedAt} = ?`, params: [now] })).length > 0;
}

/**
 * Extends the leases of `claims` to `leaseUntil`, for rows still held under those tokens, without waiting for a row
 * another transaction holds locked (`updateClaimedRowsNotWaiting`), on either table: a renewal that waited for one row
 * would keep the locks it took on the others (their start marks and stamps then wait too) and renew nothing until
 * that transaction ended.
 * @returns the ids whose lease was extended, and those busy (not extended this time); a claim missing from both is lost.
 */
export function renewLeases(
  db: DatabaseContext,
  table: DispatchTable,
  claims: readonly Claim[],
  leaseUntil: Date,
): Promise<ClaimedRowsAnswer> {
  const { column: c } = dispatchTableNames(db, table);
  const renew = { set: `${c.lockedUntil} = ?`, params: [leaseUntil], condition: ` and ${c.lockedUntil} is not null` };
  return updateClaimedRowsNotWaiting(db, table, claims, renew);
}

/**
 * Stamps published the outbox rows of `claims` (one statement for the rows published together), only those whose
 * claim token still matches, without waiting for a row another transaction holds locked
 * (`updateClaimedRowsNotWaiting`).
 * @returns the ids stamped and those busy; a claim missing from both was taken over meanwhile (it will be
 * published again).
 */
export function markPublished(db: DatabaseContext, claims: readonly Claim[], now: Date): Promise<ClaimedRowsAnswer> {
  const { column: c } = db.tables.outbox;
  return updateClaimedRowsNotWaiting(db, DISPATCH_TABLES.outbox, claims, {
    set: `${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.lockedUntil} = null`,
    params: [now, OUTBOX_OUTCOMES.PUBLISHED],
  });
}

/** One claimed row's UPDATE: `set` on the row of `claim`, while it is still pending under the claim's token. */
function updateClaimedRow(db: DatabaseContext, table: DispatchTable, claim: Claim, set: string, params: readonly unknown[]): SqlStatement {
  const { table: name, column: c } = dispatchTableNames(db, table);
  return {
    sql: `update ${name} set ${set}
     where ${c.id} = ? and ${c.token} = ? and ${db.dialect.pendingById(c.dispatchedAt)}`,
    params: [...params, claim.id, claim.token],
  };
}

/**
 * Gives a claimed row back before its lease ends and forgets its delivery start: due again at once, and
 * not charged. For a stopping dispatcher's unstarted rows and for deliveries a database fault interrupted.
 */
export function releaseClaim(db: DatabaseContext, table: DispatchTable, claim: Claim): Promise<number> {
  const { column: c } = dispatchTableNames(db, table);
  return runStatement(db.autocommit, updateClaimedRow(db, table, claim, `${c.lockedUntil} = null, ${c.deliveryStartedAt} = null`, []));
}

/**
 * Gives a claimed row back uncharged, due again at `retryAt`, and forgets its delivery start: for a timer whose unit
 * of work met concurrency conflicts past the runtime's retries (its saga is busy; the delivery did not fail).
 */
export function giveBackUntil(db: DatabaseContext, table: DispatchTable, claim: Claim, retryAt: Date): Promise<number> {
  const { column: c } = dispatchTableNames(db, table);
  const set = `${c.availableAt} = ?, ${c.lockedUntil} = null, ${c.deliveryStartedAt} = null`;
  return runStatement(db.autocommit, updateClaimedRow(db, table, claim, set, [retryAt]));
}

/** A failed delivery to record. */
export interface FailureRecord {
  readonly claim: Claim;
  /** The failure, for `last_error`. */
  readonly error: string;
  /** When the row may be claimed again (backoff). */
  readonly retryAt: Date;
}

/**
 * Counts a failed delivery: the row stays pending, `available_at` moves to `retryAt`, and a new token
 * makes a delivery still in flight (one that timed out) unable to commit.
 */
export function recordFailure(db: DatabaseContext, table: DispatchTable, failure: FailureRecord): Promise<number> {
  const { column: c } = dispatchTableNames(db, table);
  const set = `${c.attempts} = ${c.attempts} + 1, ${c.lastError} = ?, ${c.availableAt} = ?, ${c.lockedUntil} = null,
       ${c.token} = ${db.dialect.newTokenSql}`;
  const params = [storableText(failure.error, ERROR_TEXT_LIMIT), failure.retryAt];
  return runStatement(db.autocommit, updateClaimedRow(db, table, failure.claim, set, params));
}

/** The dead-lettered outcome of each table (the same word in each). */
const DEAD_LETTERED = {
  [DISPATCH_TABLES.timer]: TIMER_OUTCOMES.DEAD_LETTERED,
  [DISPATCH_TABLES.outbox]: OUTBOX_OUTCOMES.DEAD_LETTERED,
  [DISPATCH_TABLES.inbox]: INBOX_OUTCOMES.DEAD_LETTERED,
} as const;

/** A row to retire. */
export interface DeadLetterRecord {
  readonly claim: Claim;
  /** The last failure, for `last_error`. */
  readonly error: string;
  /** Why the row is retired, for `dead_letter_reason`. */
  readonly reason: string;
  readonly now: Date;
  /**
   * Whether this retirement ends a delivery attempt of its own (it failed for the last allowed time).
   * False when the last failure was already counted (a lost lease, counted by the claim) or no delivery
   * was attempted (a row that cannot be decoded).
   */
  readonly countsAnAttempt: boolean;
}

/**
 * Retires a row: kept, stamped dead-lettered with the reason, out of the due set; for a timer the name is
 * free again (the unique index covers pending rows only).
 */
export function deadLetter(db: DatabaseContext, table: DispatchTable, record: DeadLetterRecord): Promise<number> {
  const { column: c } = dispatchTableNames(db, table);
  const outcome = DEAD_LETTERED[table];
  const set = `${c.attempts} = ${c.attempts} + ${record.countsAnAttempt ? 1 : 0}, ${c.lastError} = ?, ${c.lockedUntil} = null,
       ${c.token} = ${db.dialect.newTokenSql}, ${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.deadLetteredAt} = ?, ${c.deadLetterReason} = ?`;
  const params = [
    storableText(record.error, ERROR_TEXT_LIMIT),
    record.now,
    outcome,
    record.now,
    storableText(record.reason, ERROR_TEXT_LIMIT),
  ];
  return runStatement(db.autocommit, updateClaimedRow(db, table, record.claim, set, params));
}
