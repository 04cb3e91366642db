import { OUTBOX_OUTCOMES, TIMER_OUTCOMES } from '../entities/dispatch-states.js';
import { storableText } from '../text/storable-text.js';
import type { DatabaseContext, OutboxProperty, TimerProperty } from './database-context.js';
import { placeholders, queryRows, runStatement } from './sql-executor.js';

/** The two tables the dispatcher drains; they share their dispatch columns. */
export const DISPATCH_TABLES = { timer: 'saga_timer', outbox: 'saga_outbox' } as const;
export type DispatchTable = (typeof DISPATCH_TABLES)[keyof typeof DISPATCH_TABLES];

/** One claimed row: its id and the token of the claim. */
export interface Claim {
  readonly id: string;
  readonly token: string;
}

/**
 * Most UTF-16 code units stored in `last_error` / `dead_letter_reason`. Error text is made storable first
 * (U+0000 and lone surrogates replaced): a statement refused for its text would leave the failure uncounted.
 */
export const ERROR_TEXT_LIMIT = 2_000;

/** The `last_error` a claim records when it takes over a row whose started delivery lost its lease. */
export const LEASE_EXPIRED_ERROR = 'LeaseExpired: the dispatcher delivering it stopped before finishing (crash or kill)';

/** How {@link LEASE_EXPIRED_ERROR} begins: a `last_error` beginning so marks a delivery that died with its dispatcher. */
const LEASE_EXPIRED_PREFIX = 'LeaseExpired:';

/** Whether `lastError` says the row's last delivery died with its dispatcher. */
export function diedWithItsDispatcher(lastError: string | null | undefined): boolean {
  return lastError?.startsWith(LEASE_EXPIRED_PREFIX) ?? false;
}

/** Properties a claim returns, per table; rows come back keyed by property name. */
const CLAIMED: { readonly saga_timer: readonly TimerProperty[]; readonly saga_outbox: readonly OutboxProperty[] } = {
  saga_timer: [
    'id',
    'sagaType',
    'sagaId',
    'name',
    'dueAt',
    'availableAt',
    'messageType',
    'payload',
    'correlationId',
    'token',
    'attempts',
    'lastError',
  ],
  saga_outbox: [
    'id',
    'sagaType',
    'sagaId',
    'messageType',
    'payload',
    'headers',
    'correlationId',
    'availableAt',
    'token',
    'attempts',
    'lastError',
    'createdAt',
  ],
};

/** The quoted names of the columns both tables share. */
function shared(db: DatabaseContext, table: DispatchTable) {
  const { table: name, column } = db.tables[table] as { table: string; column: Record<TimerProperty & OutboxProperty, string> };
  return { name, c: column };
}

/** What a claim leaves alone besides rows that are not due. */
export interface ClaimGuard {
  /**
   * A row whose lease ran out while its delivery had started is taken over only when that delivery started
   * at or before this instant (`now - deliveryTimeoutMs`): until then it may still be running (its
   * dispatcher lost the database for longer than the lease, not its process). Default `now`.
   */
  readonly startedBefore?: Date;
  /** Ids this dispatcher holds itself (waiting or being delivered): never re-claimed by it. */
  readonly exclude?: readonly string[];
}

/** Most held ids one claim statement excludes; beyond that the token check still guards a self re-claim. */
const EXCLUDE_LIMIT = 500;

/**
 * Deliveries a claim marks started itself (`delivery_started_at = now`), saving the start mark's own
 * statement: only for a claimer that starts those rows at once, with no other delivery ahead of them.
 */
export interface StartAtClaim {
  /** Most rows marked: the delivery slots that are free (and held free) for this claim. */
  readonly upTo: number;
  /** Rows with this many attempts or more are retired without a delivery, so never marked. */
  readonly maxAttempts: number;
}

/**
 * Claims up to `limit` due rows (`available_at <= now`, not leased), oldest first, in ONE statement: each
 * claimed row gets a new token, `locked_until = leaseUntil`, and no delivery start. On PostgreSQL the due
 * subquery skips rows other claims hold locked (`FOR UPDATE SKIP LOCKED`), so dispatchers take disjoint
 * batches, and the statement is planned under the dialect's `claimSettings` (no sort: the claim index read in order,
 * whatever the statistics say); on SQLite the UPDATE takes the write lock before it reads (waiting up to the
 * connection's busy timeout), so concurrent claims run one after the other and never read the same due row.
 *
 * A row whose previous claim ran out while its delivery had started (`locked_until` and
 * `delivery_started_at` both set: every way a delivery ends clears the lease) is taken over only once that
 * delivery started `guard.startedBefore` or earlier, and is then charged that lost delivery as a failed
 * attempt, with {@link LEASE_EXPIRED_ERROR}. A row whose claim ran out before its delivery started is taken
 * over free. Rows in `guard.exclude` are left alone.
 *
 * With `startAtClaim`, the claim also marks started, at `now`, the rows a delivery pool with `upTo` free
 * slots starts at once: the first row of each saga instance in the batch (the head of its lane), oldest
 * first, up to `upTo` of them, leaving unmarked the rows delivered alone (their last delivery died with its
 * dispatcher, or this claim charges them that) and the rows out of attempts. Those come back with
 * `deliveryStartedAt` set; every other row with it null.
 * @returns the claimed rows keyed by property name, in no particular order.
 */
export function claimDueRows(
  db: DatabaseContext,
  table: DispatchTable,
  now: Date,
  leaseUntil: Date,
  limit: number,
  guard: ClaimGuard = {},
  startAtClaim?: StartAtClaim,
) {
  const { name, c } = shared(db, table);
  const columns = db.tables[table].column as Record<string, string>;
  const lost = `${c.lockedUntil} is not null and ${c.deliveryStartedAt} is not null`;
  const exclude = (guard.exclude ?? []).slice(0, EXCLUDE_LIMIT);
  const notHeld = exclude.length > 0 ? ` and ${c.id} not in (${placeholders(exclude.length)})` : '';
  const returning = `returning ${[...CLAIMED[table], ...(startAtClaim ? ['deliveryStartedAt'] : [])]
    .map((p) => `${columns[p]} as "${p}"`)
    .join(', ')}`;
  const charge = `${c.attempts} = ${c.attempts} + (case when ${lost} then 1 else 0 end),
       ${c.lastError} = case when ${lost} then '${LEASE_EXPIRED_ERROR}' else ${c.lastError} end`;
  const pick = `select ${c.id} from ${name} where ${due(db, table)}${notHeld} order by ${c.availableAt}, ${c.id} limit ?${
    db.dialect.supportsSkipLocked ? ' for update skip locked' : ''
  }`;
  const dueParams = [now, now, guard.startedBefore ?? now, ...exclude, limit];
  if (!startAtClaim) {
    return db.transactions.queryRowsUnder<Record<string, unknown>>(
      db.autocommit,
      db.dialect.claimSettings,
      `update ${name} set ${c.token} = ${db.dialect.newTokenSql}, ${c.lockedUntil} = ?, ${c.deliveryStartedAt} = null, ${charge}
       where ${c.id} in (${pick})
       ${returning}`,
      [leaseUntil, ...dueParams],
    );
  }
  // "picked" reads every column before the update: whether the claim charges a lost delivery, and the
  // last error, decide which rows are delivered alone (the dispatcher's diedWithItsDispatcher()). A saga with
  // such a row in the batch has none of its rows started here: its later rows wait in its lane behind that one.
  // "locked" picks and locks the ids alone: PostgreSQL sorts every due row under a locking LIMIT (no top-N
  // sort), and each column the pick returns widens that sort; "picked" then reads the batch's columns by id,
  // locking again (rows this statement already holds) so that it reads the version "locked" locked, as the
  // UPDATE does, when another transaction changed a row after this statement's snapshot.
  const picked = `select ${c.id}, ${c.sagaType} as "st", ${c.sagaId} as "si", ${c.availableAt} as "av", ${c.attempts} as "at",
       case when ${lost} then 1 else 0 end as "lost", ${c.lastError} as "le" from ${name}
     where ${c.id} in (select ${c.id} from "locked")${db.dialect.supportsSkipLocked ? ' for update' : ''}`;
  return db.transactions.queryRowsUnder<Record<string, unknown>>(
    db.autocommit,
    db.dialect.claimSettings,
    `with "locked" as (${pick}),
     "picked" as (${picked}),
     "lanes" as (
       select ${c.id}, "av", "at", row_number() over (partition by "st", "si" order by "av", ${c.id}) as "in_lane",
         max(case when "lost" = 1 or substr(coalesce("le", ''), 1, ${LEASE_EXPIRED_PREFIX.length}) = '${LEASE_EXPIRED_PREFIX}' then 1 else 0 end)
           over (partition by "st", "si") as "isolated"
       from "picked"),
     "starting" as (
       select ${c.id} from (select ${c.id}, "at", row_number() over (order by "av", ${c.id}) as "head" from "lanes" where "in_lane" = 1 and "isolated" = 0) as "heads"
       where "head" <= ? and "at" < ?)
     update ${name} set ${c.token} = ${db.dialect.newTokenSql}, ${c.lockedUntil} = ?,
       ${c.deliveryStartedAt} = case when ${c.id} in (select ${c.id} from "starting") then coalesce(?, ${c.deliveryStartedAt}) else null end,
       ${charge}
     where ${c.id} in (select ${c.id} from "picked")
     ${returning}`,
    // coalesce() gives the parameter the column's type (PostgreSQL types a CASE of parameters as text).
    [...dueParams, startAtClaim.upTo, startAtClaim.maxAttempts, leaseUntil, now],
  );
}

function due(db: DatabaseContext, table: DispatchTable): string {
  const { c } = shared(db, table);
  const mayStillRun = `${c.deliveryStartedAt} is not null and ${c.deliveryStartedAt} > ?`;
  return `${c.dispatchedAt} is null and ${c.availableAt} <= ? and (${c.lockedUntil} is null or (${c.lockedUntil} <= ? and not (${mayStillRun})))`;
}

/** Most claims one statement over several claims carries (two parameters each). */
const CLAIMS_PER_STATEMENT = 500;

/**
 * Runs `update <table> set <assignments> where (id, token) is one of `claims` and the row is still pending`,
 * in statements of at most {@link CLAIMS_PER_STATEMENT} claims, each id matched with its own claim's token. With
 * `skipLocked` (PostgreSQL), a row another transaction holds locked is left alone instead of waited for.
 * @returns the ids of the rows it updated; a claim missing from it was lost (taken over, or not pending), or with
 * `skipLocked` locked.
 */
async function updateClaimedRows(
  db: DatabaseContext,
  table: DispatchTable,
  claims: readonly Claim[],
  assignments: string,
  params: readonly unknown[],
  extraCondition = '',
  skipLocked = false,
): Promise<string[]> {
  const { name, c } = shared(db, table);
  const updated: string[] = [];
  for (let i = 0; i < claims.length; i += CLAIMS_PER_STATEMENT) {
    const held = heldCondition(db, table, claims.slice(i, i + CLAIMS_PER_STATEMENT));
    // The UPDATE checks the pending condition on the row it locked, in a form the claim index's predicate does not
    // match (DialectAdapter.pendingById): with `dispatched_at is null`, on statistics that said few rows were
    // pending, PostgreSQL read every pending row's entry of that index and, for each, the locking subquery's rows
    // again (a nested-loop semi join: 100 ids stamped among 2,000 pending rows in 30-50 ms instead of 2).
    // The UPDATE finds the rows the subquery locked by primary key too (`= any(array(...))`): `in (...)` let the
    // planner hash them against a read of the whole table.
    const pending = `${db.dialect.pendingById(c.dispatchedAt)}${extraCondition}`;
    const rows = await queryRows<{ id: string }>(
      db.autocommit,
      `update ${name} set ${assignments}
       where ${db.dialect.supportsSkipLocked ? `${c.id} = any(array(${lockedInSagaOrder(c, name, held.condition, skipLocked)}))` : held.condition} and ${pending}
       returning ${c.id} as "id"`,
      [...params, ...held.params],
    );
    for (const row of rows) updated.push(String(row.id));
  }
  return updated;
}

/**
 * The condition "the row is one of `chunk`'s, under that claim's token" (at most {@link CLAIMS_PER_STATEMENT}
 * claims), and its parameters.
 */
function heldCondition(db: DatabaseContext, table: DispatchTable, chunk: readonly Claim[]): { condition: string; params: unknown[] } {
  const { c } = shared(db, table);
  const postgres = db.dialect.name === 'postgresql';
  const ids = chunk.map((claim) => claim.id);
  const tokens = chunk.map((claim) => claim.token);
  // Each id is matched with its own claim's token (pairs, not `id in (...) and token in (...)`, which would take
  // a row under another claim's token); `id` alone first, for the primary key's index.
  // PostgreSQL: array parameters (one each is quoted, sent and parsed instead of n: MikroORM 6 inlines every
  // parameter into the statement's text); each row's token is compared with the one at its id's position, a
  // scalar filter (a semi-join with unnest() was planned as a nested loop over both lists: 100 x 50 rows). The
  // ids' array is read through a scalar subquery, whose length the planner cannot see: it then looks the ids up
  // by primary key, where a literal array of 100 made a table without statistics look cheaper to read whole.
  const pairs = postgres
    ? `${c.token} = (?::uuid[])[array_position(?::uuid[], ${c.id})]`
    : `(${c.id}, ${c.token}) in (values ${chunk.map(() => '(?, ?)').join(', ')})`;
  const condition = `${postgres ? `${c.id} = any((select ?::uuid[])::uuid[])` : `${c.id} in (${placeholders(chunk.length)})`} and ${pairs}`;
  return {
    condition,
    params: postgres
      ? [arrayLiteral(ids), arrayLiteral(tokens), arrayLiteral(ids)]
      : [...ids, ...chunk.flatMap((claim) => [claim.id, claim.token])],
  };
}

/**
 * A PostgreSQL array literal of `values` (`{"a","b"}`), every element quoted: one text parameter whose type the
 * column it is compared with decides (`uuid[]` for `id = any(?)`); a value that is not of that type fails the
 * statement as a bad parameter would.
 */
function arrayLiteral(values: readonly string[]): string {
  return `{${values.map((value) => `"${value.replace(/[\\"]/g, '\\$&')}"`).join(',')}}`;
}

/** The columns {@link lockedInSagaOrder} orders by. */
interface SagaOrderColumns {
  readonly id: string;
  readonly sagaType: string;
  readonly sagaId: string;
}

/**
 * The ids of the rows of `table` matching `condition`, locked in the order of their saga (type, id), then id.
 * A group commit (docs/guarantees.md) holds the timer rows its units stamped or deleted until its COMMIT and
 * takes them in that same order; a statement updating many rows in the order of its plan's scan could hold one
 * row a group needs while it waits for another the group holds: a deadlock. PostgreSQL only (SQLite has no
 * row locks; a write takes the database's one write lock).
 */
function lockedInSagaOrder(c: SagaOrderColumns, table: string, condition: string, skipLocked = false): string {
  return `select ${c.id} from ${table} where ${condition}
         order by ${c.sagaType} collate "C", ${c.sagaId}, ${c.id} for update${skipLocked ? ' skip locked' : ''}`;
}

/**
 * Records that the deliveries under `claims` start now, in one statement before their steps or publishers
 * run (the dispatcher gathers the deliveries starting together): from here on a lost lease is their fault. Waits for
 * a row another transaction holds locked: a row of a saga's lane let go here would let the saga's later messages of
 * the pass go out before it (break22), where the messages of one saga go out in order within a pass.
 * @returns the ids marked; a claim missing from it was lost (another dispatcher took the row, or it left
 * the pending set).
 */
export function markDeliveriesStarted(db: DatabaseContext, table: DispatchTable, claims: readonly Claim[], now: Date): Promise<string[]> {
  const { c } = shared(db, table);
  return updateClaimedRows(db, table, claims, `${c.deliveryStartedAt} = ?`, [now]);
}

/**
 * Extends the leases of `claims` to `leaseUntil`, for rows still held under those tokens. Outbox rows: does not wait
 * for a row another transaction holds locked ({@link updateClaimedRowsNotWaiting}): the library's units never lock an
 * outbox row once they inserted it, so a lock on one is somebody else's, and a renewal that waited for it would hold
 * up the renewal of every other held row. Timer rows: waits, as a group commit holds the timer rows its units stamp or
 * delete until its COMMIT, for milliseconds (in saga order, as this statement takes them).
 * @returns the ids whose lease was extended, and those busy (not extended this time); a claim missing from both is lost.
 */
export async function renewLeases(
  db: DatabaseContext,
  table: DispatchTable,
  claims: readonly Claim[],
  leaseUntil: Date,
): Promise<ClaimedRowsAnswer> {
  const { c } = shared(db, table);
  const renew = [claims, `${c.lockedUntil} = ?`, [leaseUntil], ` and ${c.lockedUntil} is not null`] as const;
  if (table === DISPATCH_TABLES.outbox) return updateClaimedRowsNotWaiting(db, table, ...renew);
  return { written: await updateClaimedRows(db, table, ...renew), busy: [] };
}

/**
 * Gives a claimed row back before its lease ends and forgets its delivery start: due again at once, and
 * not charged. For a stopping dispatcher's unstarted rows and for deliveries a database fault interrupted.
 */
export function releaseClaim(db: DatabaseContext, table: DispatchTable, claim: Claim): Promise<number> {
  const { name, c } = shared(db, table);
  return runStatement(
    db.autocommit,
    `update ${name} set ${c.lockedUntil} = null, ${c.deliveryStartedAt} = null
     where ${c.id} = ? and ${c.token} = ? and ${db.dialect.pendingById(c.dispatchedAt)}`,
    [claim.id, claim.token],
  );
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
  const { name, c } = shared(db, table);
  return runStatement(
    db.autocommit,
    `update ${name} set ${c.attempts} = ${c.attempts} + 1, ${c.lastError} = ?, ${c.availableAt} = ?, ${c.lockedUntil} = null,
       ${c.token} = ${db.dialect.newTokenSql}
     where ${c.id} = ? and ${c.token} = ? and ${db.dialect.pendingById(c.dispatchedAt)}`,
    [storableText(failure.error, ERROR_TEXT_LIMIT), failure.retryAt, failure.claim.id, failure.claim.token],
  );
}

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
  const { name, c } = shared(db, table);
  const outcome = table === DISPATCH_TABLES.timer ? TIMER_OUTCOMES.DEAD_LETTERED : OUTBOX_OUTCOMES.DEAD_LETTERED;
  return runStatement(
    db.autocommit,
    `update ${name} set ${c.attempts} = ${c.attempts} + ${record.countsAnAttempt ? 1 : 0}, ${c.lastError} = ?, ${c.lockedUntil} = null,
       ${c.token} = ${db.dialect.newTokenSql}, ${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.deadLetteredAt} = ?, ${c.deadLetterReason} = ?
     where ${c.id} = ? and ${c.token} = ? and ${db.dialect.pendingById(c.dispatchedAt)}`,
    [
      storableText(record.error, ERROR_TEXT_LIMIT),
      record.now,
      outcome,
      record.now,
      storableText(record.reason, ERROR_TEXT_LIMIT),
      record.claim.id,
      record.claim.token,
    ],
  );
}

/** What a write of claimed rows that does not wait for row locks wrote. */
export interface ClaimedRowsAnswer {
  /** The ids written. */
  readonly written: readonly string[];
  /**
   * The ids still held under their claims that another transaction holds locked (an operator's open transaction):
   * not written, and not waited for (PostgreSQL); write them again later.
   */
  readonly busy: readonly string[];
}

/**
 * {@link updateClaimedRows} without waiting for a row another transaction holds locked (PostgreSQL: `skip locked`):
 * such a row is reported busy (a second statement, only when a row was not written, reads which of them are still
 * pending under their tokens). A claimed row's lock is held by its own claimer only while the claimer writes it, for
 * milliseconds; a lock held longer is somebody else's (an operator's open transaction), and waiting for it would hold
 * up the dispatcher. SQLite has no row locks: never busy.
 * @returns the ids written and those busy; a claim missing from both was lost (taken over, or not pending).
 */
async function updateClaimedRowsNotWaiting(
  db: DatabaseContext,
  table: DispatchTable,
  claims: readonly Claim[],
  assignments: string,
  params: readonly unknown[],
  extraCondition = '',
): Promise<ClaimedRowsAnswer> {
  const written = await updateClaimedRows(db, table, claims, assignments, params, extraCondition, true);
  if (written.length === claims.length || !db.dialect.supportsSkipLocked) return { written, busy: [] };
  // Rare: a claim not written was lost, or its row was locked. Those still pending under their tokens were locked.
  const { name, c } = shared(db, table);
  const done = new Set(written);
  const missing = claims.filter((claim) => !done.has(claim.id));
  const busy: string[] = [];
  for (let i = 0; i < missing.length; i += CLAIMS_PER_STATEMENT) {
    const held = heldCondition(db, table, missing.slice(i, i + CLAIMS_PER_STATEMENT));
    const still = await queryRows<{ id: string }>(
      db.autocommit,
      `select ${c.id} as "id" from ${name} where ${held.condition} and ${db.dialect.pendingById(c.dispatchedAt)}${extraCondition}`,
      held.params,
    );
    busy.push(...still.map((row) => String(row.id)));
  }
  return { written, busy };
}

/**
 * Stamps published the outbox rows of `claims` (one statement for the rows published together), only those whose
 * claim token still matches, without waiting for a row another transaction holds locked
 * ({@link updateClaimedRowsNotWaiting}).
 * @returns the ids stamped and those busy; a claim missing from both was taken over meanwhile (it will be
 * published again).
 */
export function markPublished(db: DatabaseContext, claims: readonly Claim[], now: Date): Promise<ClaimedRowsAnswer> {
  const { c } = shared(db, DISPATCH_TABLES.outbox);
  return updateClaimedRowsNotWaiting(
    db,
    DISPATCH_TABLES.outbox,
    claims,
    `${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.lockedUntil} = null`,
    [now, OUTBOX_OUTCOMES.PUBLISHED],
  );
}

// A never-attempted timer has available_at = due_at (insert and replace set both, attempts = 0), so the
// backlog filters below test available_at and use the partial due index. A claimed timer keeps its
// locked_until until its delivery ends, so one whose dispatcher died is not mistaken for backlog either.
function neverAttempted(db: DatabaseContext): string {
  const c = db.tables.saga_timer.column;
  return `${c.dispatchedAt} is null and ${c.attempts} = 0 and ${c.lockedUntil} is null`;
}

/**
 * Catch-up `skip-beyond-max-age`: stamps `missed` every backlog timer (never attempted, never claimed) that
 * is overdue by more than the max age at `now`.
 */
export function missTimersOverdueBefore(db: DatabaseContext, overdueBefore: Date, now: Date) {
  const { table, column: c } = db.tables.saga_timer;
  return queryRows<{ sagaType: string }>(
    db.autocommit,
    `update ${table} set ${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.lockedUntil} = null
     where ${inSagaOrder(db, table, `${neverAttempted(db)} and ${c.availableAt} < ?`)}
     returning ${c.sagaType} as "sagaType"`,
    [now, TIMER_OUTCOMES.MISSED, overdueBefore],
  );
}

/**
 * Catch-up `fire-latest-per-saga`: stamps `missed` every backlog timer (never attempted, due before
 * `backlogBefore`) that has a newer due timer pending on the same saga instance; the newest one fires.
 */
export function missTimersSupersededInBacklog(db: DatabaseContext, backlogBefore: Date, now: Date) {
  const { table, column: c } = db.tables.saga_timer;
  const newer = (column: string) => `"newer".${column}`;
  const self = (column: string) => `${table}.${column}`;
  return queryRows<{ sagaType: string }>(
    db.autocommit,
    `update ${table} set ${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.lockedUntil} = null
     where ${inSagaOrder(
       db,
       table,
       `${neverAttempted(db)} and ${c.availableAt} < ?
       and exists (select 1 from ${table} as "newer"
         where ${newer(c.sagaType)} = ${self(c.sagaType)} and ${newer(c.sagaId)} = ${self(c.sagaId)}
           and ${newer(c.dispatchedAt)} is null and ${newer(c.dueAt)} <= ?
           and (${newer(c.dueAt)} > ${self(c.dueAt)}
             or (${newer(c.dueAt)} = ${self(c.dueAt)} and ${newer(c.id)} > ${self(c.id)})))`,
     )}
     returning ${c.sagaType} as "sagaType"`,
    [now, TIMER_OUTCOMES.MISSED, backlogBefore, now],
  );
}

/** `condition`, or on PostgreSQL: the rows matching it, locked in saga order first (see {@link lockedInSagaOrder}). */
function inSagaOrder(db: DatabaseContext, table: string, condition: string): string {
  return db.dialect.supportsSkipLocked
    ? `${db.tables.saga_timer.column.id} in (${lockedInSagaOrder(db.tables.saga_timer.column, table, condition)})`
    : condition;
}

/** Due pending rows at `now` (for the drain helpers' report). */
export async function countDueRows(db: DatabaseContext, table: DispatchTable, now: Date): Promise<number> {
  const { name } = shared(db, table);
  // Three parameters for due()'s three placeholders (a started delivery counts once it started at or before `now`).
  const rows = await queryRows<{ n: number | string }>(db.autocommit, `select count(*) as "n" from ${name} where ${due(db, table)}`, [
    now,
    now,
    now,
  ]);
  return Number(rows[0]?.n ?? 0);
}
