import type { DatabaseContext } from './database-context.js';
import { DISPATCH_TABLES, type DispatchTable, dispatchTableNames, LEASE_EXPIRED_ERROR, LEASE_EXPIRED_PREFIX } from './dispatch-tables.js';
import { placeholders, queryRows, type SqlStatement } from './sql-executor.js';

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

/** Properties a claim returns, per table; rows come back keyed by property name. */
const CLAIMED: Readonly<Record<DispatchTable, readonly string[]>> = {
  [DISPATCH_TABLES.timer]: [
    'id',
    'sagaType',
    'sagaId',
    'name',
    'dueAt',
    'availableAt',
    'messageType',
    'payload',
    'correlationId',
    'traceContext',
    'token',
    'attempts',
    'lastError',
  ],
  [DISPATCH_TABLES.outbox]: [
    'id',
    'sagaType',
    'sagaId',
    'messageType',
    'payload',
    'headers',
    'correlationId',
    'traceContext',
    'availableAt',
    'token',
    'attempts',
    'lastError',
    'createdAt',
  ],
  [DISPATCH_TABLES.inbox]: [
    'id',
    'sagaType',
    'sagaKey',
    'messageType',
    'payload',
    'messageId',
    'correlationId',
    'availableAt',
    'token',
    'attempts',
    'lastError',
    'traceContext',
  ],
};

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
  const claim = claimParts(db, table, guard, startAtClaim !== undefined);
  const dueParams = [now, now, guard.startedBefore ?? now, ...claim.exclude, limit];
  const { sql, params } = startAtClaim
    ? claimAndStart(db, table, claim, [...dueParams, startAtClaim.upTo, startAtClaim.maxAttempts, leaseUntil, now])
    : claimOnly(db, table, claim, [leaseUntil, ...dueParams]);
  return db.transactions.queryRowsUnder<Record<string, unknown>>(db.autocommit, db.dialect.claimSettings, sql, params);
}

/** What both forms of a claim say: which rows it picks, what it charges them, what it returns. */
interface ClaimParts {
  /** "Its last delivery started and lost its lease": the claim charges it that delivery. */
  readonly lost: string;
  /** The held ids left alone (their parameters follow the due condition's). */
  readonly exclude: readonly string[];
  /** The SELECT of the due ids, oldest first, `limit ?` last. */
  readonly pick: string;
  readonly charge: string;
  readonly returning: string;
}

function claimParts(db: DatabaseContext, table: DispatchTable, guard: ClaimGuard, started: boolean): ClaimParts {
  const { table: name, column: c } = dispatchTableNames(db, table);
  const lost = `${c.lockedUntil} is not null and ${c.deliveryStartedAt} is not null`;
  const exclude = (guard.exclude ?? []).slice(0, EXCLUDE_LIMIT);
  const notHeld = exclude.length > 0 ? ` and ${c.id} not in (${placeholders(exclude.length)})` : '';
  // Every column of the table, by property: those both tables have and its own.
  const columns: Readonly<Record<string, string>> = c;
  const returning = `returning ${[...CLAIMED[table], ...(started ? ['deliveryStartedAt'] : [])]
    .map((p) => `${columns[p]} as "${p}"`)
    .join(', ')}`;
  const charge = `${c.attempts} = ${c.attempts} + (case when ${lost} then 1 else 0 end),
       ${c.lastError} = case when ${lost} then '${LEASE_EXPIRED_ERROR}' else ${c.lastError} end`;
  const pick = `select ${c.id} from ${name} where ${due(db, table)}${notHeld} order by ${c.availableAt}, ${c.id} limit ?${
    db.dialect.supportsSkipLocked ? ' for update skip locked' : ''
  }`;
  return { lost, exclude, pick, charge, returning };
}

/** The claim without start marks. */
function claimOnly(db: DatabaseContext, table: DispatchTable, claim: ClaimParts, params: unknown[]): SqlStatement {
  const { table: name, column: c } = dispatchTableNames(db, table);
  return {
    sql: `update ${name} set ${c.token} = ${db.dialect.newTokenSql}, ${c.lockedUntil} = ?, ${c.deliveryStartedAt} = null, ${claim.charge}
       where ${c.id} in (${claim.pick})
       ${claim.returning}`,
    params,
  };
}

/**
 * The claim that also marks started the heads of the batch's lanes (see {@link claimDueRows}).
 * "picked" reads every column before the update: whether the claim charges a lost delivery, and the
 * last error, decide which rows are delivered alone (the dispatcher's diedWithItsDispatcher()). A saga with
 * such a row in the batch has none of its rows started here: its later rows wait in its lane behind that one.
 * "locked" picks and locks the ids alone: PostgreSQL sorts every due row under a locking LIMIT (no top-N
 * sort), and each column the pick returns widens that sort; "picked" then reads the batch's columns by id,
 * locking again (rows this statement already holds) so that it reads the version "locked" locked, as the
 * UPDATE does, when another transaction changed a row after this statement's snapshot.
 */
function claimAndStart(db: DatabaseContext, table: DispatchTable, claim: ClaimParts, params: unknown[]): SqlStatement {
  const { table: name, column: c, sagaColumn } = dispatchTableNames(db, table);
  const picked = `select ${c.id}, ${c.sagaType} as "st", ${sagaColumn} as "si", ${c.availableAt} as "av", ${c.attempts} as "at",
       case when ${claim.lost} then 1 else 0 end as "lost", ${c.lastError} as "le" from ${name}
     where ${c.id} in (select ${c.id} from "locked")${db.dialect.supportsSkipLocked ? ' for update' : ''}`;
  return {
    sql: `with "locked" as (${claim.pick}),
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
       ${claim.charge}
     where ${c.id} in (select ${c.id} from "picked")
     ${claim.returning}`,
    // coalesce() gives the parameter the column's type (PostgreSQL types a CASE of parameters as text).
    params,
  };
}

/**
 * "Due at `now`" (three parameters: now, now, and the latest start a lost delivery is taken over from). A staged
 * delivery is due only as the first pending row of its saga (`firstOfItsSaga`).
 */
function due(db: DatabaseContext, table: DispatchTable, firstOfSagaOnly = true): string {
  const c = dispatchTableNames(db, table).column;
  const mayStillRun = `${c.deliveryStartedAt} is not null and ${c.deliveryStartedAt} > ?`;
  const first = table === DISPATCH_TABLES.inbox && firstOfSagaOnly ? ` and ${firstOfItsSaga(db)}` : '';
  return `${c.dispatchedAt} is null and ${c.availableAt} <= ? and (${c.lockedUntil} is null or (${c.lockedUntil} <= ? and not (${mayStillRun})))${first}`;
}

/**
 * "The first pending row of its saga" (type and correlation value), by order key: the deliveries of one saga run one at
 * a time in commit order. A row backing off after a failure, or not yet due, holds the later ones; once it leaves the
 * pending set (delivered, ignored, dead-lettered) the next is claimed. Without locks: a claim cannot miss an earlier row
 * committed meanwhile (that row's stager held the saga key's lock until its COMMIT, before the later row took its order
 * key). A scalar subquery, run per candidate row as one descent of `saga_inbox_saga_key_idx` (its predicate, `outcome
 * is null`, is what this says of "pending"): as NOT EXISTS, PostgreSQL joined it with every pending row when
 * statistics said few were pending.
 */
function firstOfItsSaga(db: DatabaseContext): string {
  const { table, column: c } = db.tables.inbox;
  const earlier = (column: string) => `"earlier".${column}`;
  return `${table}.${c.orderKey} = (select min(${earlier(c.orderKey)}) from ${table} as "earlier"
       where ${earlier(c.sagaType)} = ${table}.${c.sagaType} and ${earlier(c.sagaKey)} = ${table}.${c.sagaKey} and ${earlier(c.outcome)} is null)`;
}

/**
 * Due pending rows at `now` (for the drain helpers' report). Staged deliveries: the first of each saga, or with
 * `laterOfTheirSaga` every due one (a saga's take a pass each).
 */
export async function countDueRows(db: DatabaseContext, table: DispatchTable, now: Date, laterOfTheirSaga = false): Promise<number> {
  const { table: name } = dispatchTableNames(db, table);
  // Three parameters for due()'s three placeholders (a started delivery counts once it started at or before `now`).
  const rows = await queryRows<{ n: number | string }>(db.autocommit, {
    sql: `select count(*) as "n" from ${name} where ${due(db, table, !laterOfTheirSaga)}`,
    params: [now, now, now],
  });
  return Number(rows[0]?.n ?? 0);
}
