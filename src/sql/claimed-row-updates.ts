import { classifyDriverError } from '../orm/index.js';
import type { DatabaseContext } from './database-context.js';
import { type Claim, type DispatchTable, dispatchTableNames, lockedInSagaOrder } from './dispatch-tables.js';
import { placeholders, queryRows, type SqlStatement } from './sql-executor.js';

/** Most claims one statement over several claims carries (two parameters each). */
const CLAIMS_PER_STATEMENT = 500;

/**
 * How long a write that skipped a locked row waits for it when it tries that row again, alone (PostgreSQL
 * `lock_timeout`, ms). The dispatcher's own statements on a claimed row (a start mark, a renewal, a stamp, the runtime's
 * group commit stamping a timer fired) hold its lock for milliseconds; a lock held longer is another transaction's.
 * The runtime's group commit gives up on a row with the same bound (`groupCommit.lockTimeoutMs`' default).
 */
export const OWN_LOCK_WAIT_MS = 250;

/** What an update of claimed rows writes: its SET list and parameters, and a condition added to its WHERE. */
export interface ClaimedRowsWrite {
  readonly set: string;
  readonly params: readonly unknown[];
  /** `and ...`, without parameters. */
  readonly condition?: string;
}

/**
 * Runs `update <table> set <write.set> where (id, token) is one of `claims` and the row is still pending`,
 * in statements of at most {@link CLAIMS_PER_STATEMENT} claims, each id matched with its own claim's token. With
 * `skipLocked` (PostgreSQL), a row another transaction holds locked is left alone instead of waited for.
 * @returns the ids of the rows it updated; a claim missing from it was lost (taken over, or not pending), or with
 * `skipLocked` locked.
 */
export async function updateClaimedRows(
  db: DatabaseContext,
  table: DispatchTable,
  claims: readonly Claim[],
  write: ClaimedRowsWrite,
  skipLocked = false,
): Promise<string[]> {
  const updated: string[] = [];
  for (let i = 0; i < claims.length; i += CLAIMS_PER_STATEMENT) {
    const rows = await queryRows<{ id: string }>(
      db.autocommit,
      claimedRowsUpdate(db, table, claims.slice(i, i + CLAIMS_PER_STATEMENT), write, skipLocked),
    );
    for (const row of rows) updated.push(String(row.id));
  }
  return updated;
}

/** The UPDATE of {@link updateClaimedRows} for one chunk of at most {@link CLAIMS_PER_STATEMENT} claims. */
function claimedRowsUpdate(
  db: DatabaseContext,
  table: DispatchTable,
  chunk: readonly Claim[],
  write: ClaimedRowsWrite,
  skipLocked: boolean,
): SqlStatement {
  const { table: name, column: c, sagaColumn } = dispatchTableNames(db, table);
  const held = heldCondition(db, table, chunk);
  // The UPDATE checks the pending condition on the row it locked, in a form the claim index's predicate does not
  // match (DialectAdapter.pendingById): with `dispatched_at is null`, on statistics that said few rows were
  // pending, PostgreSQL read every pending row's entry of that index and, for each, the locking subquery's rows
  // again (a nested-loop semi join: 100 ids stamped among 2,000 pending rows in 30-50 ms instead of 2).
  // The UPDATE finds the rows the subquery locked by primary key too (`= any(array(...))`): `in (...)` let the
  // planner hash them against a read of the whole table.
  const pending = `${db.dialect.pendingById(c.dispatchedAt)}${write.condition ?? ''}`;
  return {
    sql: `update ${name} set ${write.set}
       where ${db.dialect.supportsSkipLocked ? `${c.id} = any(array(${lockedInSagaOrder({ ...c, saga: sagaColumn }, name, held.condition, skipLocked)}))` : held.condition} and ${pending}
       returning ${c.id} as "id"`,
    params: [...write.params, ...held.params],
  };
}

/**
 * The condition "the row is one of `chunk`'s, under that claim's token" (at most {@link CLAIMS_PER_STATEMENT}
 * claims), and its parameters.
 */
function heldCondition(db: DatabaseContext, table: DispatchTable, chunk: readonly Claim[]): { condition: string; params: unknown[] } {
  const c = dispatchTableNames(db, table).column;
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
 * such a row is reported busy. When a row was not written, a second statement reads which of the missing rows are
 * still pending under their tokens: those were locked. Each of them is tried once more, alone, waiting at most
 * {@link OWN_LOCK_WAIT_MS} for its lock: a lock the dispatcher's own statements held (a renewal and a stamp running
 * together) ends within it, and the row is written; a row still locked then is another transaction's (an operator's
 * open transaction), and waiting for it would hold up the dispatcher. SQLite has no row locks: never busy.
 * @returns the ids written and those busy; a claim missing from both was lost (taken over, or not pending).
 */
export async function updateClaimedRowsNotWaiting(
  db: DatabaseContext,
  table: DispatchTable,
  claims: readonly Claim[],
  write: ClaimedRowsWrite,
): Promise<ClaimedRowsAnswer> {
  const written = await updateClaimedRows(db, table, claims, write, true);
  if (written.length === claims.length || !db.dialect.supportsSkipLocked) return { written, busy: [] };
  // Rare: a claim not written was lost, or its row was locked. Those still pending under their tokens were locked.
  const { table: name, column: c } = dispatchTableNames(db, table);
  const done = new Set(written);
  const missing = claims.filter((claim) => !done.has(claim.id));
  const locked = new Set<string>();
  for (let i = 0; i < missing.length; i += CLAIMS_PER_STATEMENT) {
    const held = heldCondition(db, table, missing.slice(i, i + CLAIMS_PER_STATEMENT));
    const still = await queryRows<{ id: string }>(db.autocommit, {
      sql: `select ${c.id} as "id" from ${name} where ${held.condition} and ${db.dialect.pendingById(c.dispatchedAt)}${write.condition ?? ''}`,
      params: held.params,
    });
    for (const row of still) locked.add(String(row.id));
  }
  const busy: string[] = [];
  for (const claim of missing.filter((m) => locked.has(m.id))) {
    const outcome = await writeAloneWaitingBriefly(db, table, claim, write);
    if (outcome === 'written') written.push(claim.id);
    else if (outcome === 'busy') busy.push(claim.id);
  }
  return { written, busy };
}

/** Writes one claimed row, waiting at most {@link OWN_LOCK_WAIT_MS} for its lock (PostgreSQL). */
async function writeAloneWaitingBriefly(
  db: DatabaseContext,
  table: DispatchTable,
  claim: Claim,
  write: ClaimedRowsWrite,
): Promise<'written' | 'busy' | 'lost'> {
  const { sql, params } = claimedRowsUpdate(db, table, [claim], write, false);
  try {
    const rows = await db.transactions.queryRowsUnder(db.autocommit, [`set local lock_timeout = ${OWN_LOCK_WAIT_MS}`], sql, params);
    return rows.length > 0 ? 'written' : 'lost';
  } catch (error) {
    if (classifyDriverError(error) === 'lock wait') return 'busy';
    throw error;
  }
}
