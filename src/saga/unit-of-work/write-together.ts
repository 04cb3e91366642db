import { classifyDriverError, freshFork, type UnitTransaction } from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { runUpdatesAsOne } from '../../sql/updates-as-one.js';
import { commitFailure, failure } from './group-outcomes.js';
import { lockOrder } from './lock-order.js';
import type { PreparedWrite } from './planned-statement.js';
import type { ItemOutcome } from './unit-batcher.js';
import type { UnitWrite } from './unit-write.js';
import { runNamed, VersionConflict } from './write-failures.js';
import { preparedWrite, type WriteReport } from './write-plan.js';

/** What a runtime's group writes share. */
export interface GroupWriter {
  /** The runtime's database context; each group is written on a fresh fork of its EntityManager. */
  readonly db: DatabaseContext;
  /**
   * The tables (quoted) a group written as one statement found with triggers or rules: their units are written a
   * savepoint each from then on. Only ever added to: a table whose triggers are dropped later stays on the savepoint
   * path, which is correct for any table.
   */
  readonly tablesWithTriggers: Set<string>;
}

/**
 * Writes a group whose units each write only their saga row's versioned UPDATE (and the delivered timer's stamp),
 * with the statements of all units in one round trip, in lock order, then COMMIT. On PostgreSQL (MikroORM 6, and 7
 * where the library holds the transaction) they go as one string after BEGIN and the lock bound: two round trips for
 * the group instead of one per unit and COMMIT. Where MikroORM 7 leaves the transaction to kysely, which sends one
 * statement per round trip: when no two units write the same saga row, their statements go as statements of at most
 * 8 (`runUpdatesAsOne`), after BEGIN and the lock bound: six round trips for a group of 10 timer deliveries instead
 * of two per unit and two more. A unit whose saga row changed meanwhile changed no
 * row and fails alone with {@link VersionConflict}, as in its savepoint. Undefined, with nothing written, when the
 * group cannot go this way or must not commit as it went: a unit of another shape, a statement that failed
 * (PostgreSQL stops at it; the transaction is rolled back), a unit whose statements changed some of their rows but
 * not all (a delivered timer whose claim was lost; a stamp whose saga row changed meanwhile). The caller then writes
 * the group a unit at a time, each in its savepoint, where each unit's failure is its own. `lock wait`: the
 * statements waited out the group's lock bound on a row another transaction holds, or waited for one until a deadlock
 * with that transaction ended them (which unit waited is not known).
 * Two statements per unit, not the one of `updateSagaRowAndStampTimer`: PostgreSQL plans and runs those WITH queries
 * at about twice the cost of the two UPDATEs, which here ride in one round trip anyway.
 */
export async function writeTogether(
  groups: GroupWriter,
  units: readonly UnitWrite[],
  prelude: string | undefined,
): Promise<ItemOutcome<WriteReport>[] | 'lock wait' | undefined> {
  const { em: root, dialect, transactions } = groups.db;
  const joined = transactions.runsStatementsTogether(root);
  if (!joined && !(dialect.updatesInWith && writesDistinctRows(units))) return undefined;
  const order = lockOrder(units);
  const writes = prepareWrites(groups, units, order, joined);
  if (!writes) return undefined;
  let group: UnitTransaction;
  try {
    group = await transactions.begin(freshFork(root));
  } catch {
    return notTogether(writes);
  }
  const answers = await sendTogether(groups, group, writes, prelude, joined);
  if (answers === undefined || answers === 'lock wait') {
    notTogether(writes);
    return answers;
  }
  return commitTogether(group, units, order, writes, answers);
}

/** Nothing was written: the units' states are as their steps left them, for their writes one at a time. */
function notTogether(writes: readonly PreparedWrite[]): undefined {
  for (const write of writes) write.cancel();
  return undefined;
}

/** The writes of `units`, in lock `order`, prepared; undefined (with none left prepared) when one cannot be. */
function prepareWrites(
  { db, tablesWithTriggers }: GroupWriter,
  units: readonly UnitWrite[],
  order: readonly number[],
  joined: boolean,
): PreparedWrite[] | undefined {
  const writes: PreparedWrite[] = [];
  for (const index of order) {
    const { em, plan, target } = units[index]!;
    try {
      const write = preparedWrite(db, em, plan, target);
      if (!write) return notTogether(writes);
      writes.push(write);
      // As one statement, only on tables not found with triggers (see runUpdatesAsOne).
      if (!joined && write.tables.some((table) => tablesWithTriggers.has(table))) return notTogether(writes);
    } catch {
      // What the unit's own write throws (a state changed after its step) it throws again when written alone.
      return notTogether(writes);
    }
  }
  return writes;
}

/**
 * Sends the statements of `writes` in `group` (after `prelude`), in one round trip where `joined`, else as statements
 * of at most 8 (`runUpdatesAsOne`); their answers, in order. Undefined, with `group` rolled back, when they did not
 * go (a table with triggers or rules, a statement that failed); `lock wait` when a lock wait or a deadlock ended them.
 */
async function sendTogether(
  { tablesWithTriggers }: GroupWriter,
  group: UnitTransaction,
  writes: readonly PreparedWrite[],
  prelude: string | undefined,
  joined: boolean,
): Promise<readonly { readonly affectedRows: number }[] | 'lock wait' | undefined> {
  try {
    if (prelude) await group.sendWithNextStatement(prelude);
    const statements = writes.flatMap((write) => write.statements);
    if (joined) return await group.runStatementsTogether(statements);
    const tables = [...new Set(writes.flatMap((write) => write.tables))];
    const one = await runUpdatesAsOne(group.em, statements, tables);
    if (one.plain) return one.answers;
    // A table with triggers or rules: the units go a savepoint each, now and from now on (see runUpdatesAsOne).
    for (const table of tables) tablesWithTriggers.add(table);
    await group.rollback().catch(() => undefined);
    return undefined;
  } catch (error) {
    await group.rollback().catch(() => undefined);
    // A deadlock, too, ended a wait for a row another transaction held (PostgreSQL checks after deadlock_timeout,
    // 1 s by default): written again, the group gets only what is left of its bound, as after a lock wait.
    const kind = classifyDriverError(error);
    return kind === 'lock wait' || kind === 'deadlock' ? 'lock wait' : undefined;
  }
}

/**
 * Reads what the units' statements changed from `answers` and commits `group`: each unit whose rows were all written
 * is written, one whose saga row changed meanwhile fails with {@link VersionConflict}. Undefined, with `group` rolled
 * back, when a unit changed some of its rows but not all.
 */
async function commitTogether(
  group: UnitTransaction,
  units: readonly UnitWrite[],
  order: readonly number[],
  writes: readonly PreparedWrite[],
  answers: readonly { readonly affectedRows: number }[],
): Promise<ItemOutcome<WriteReport>[] | undefined> {
  let next = 0;
  const read = writes.map((write) => {
    const own = answers.slice(next, next + write.statements.length);
    next += write.statements.length;
    return write.read(own);
  });
  if (read.includes('partial')) {
    await group.rollback().catch(() => undefined);
    return notTogether(writes);
  }
  const outcomes: ItemOutcome<WriteReport>[] = units.map(() => failure(new VersionConflict()));
  const written: number[] = [];
  for (const [position, index] of order.entries()) {
    if (read[position] !== 'written') continue;
    writes[position]!.written();
    written.push(index);
    outcomes[index] = { ok: true, value: { timersCancelled: 0 } };
  }
  try {
    await runNamed('commit', undefined, () => group.commit());
  } catch (error) {
    await group.rollback().catch(() => undefined);
    for (const index of written) outcomes[index] = commitFailure(error, written.length);
  }
  return outcomes;
}

/**
 * Whether no two of `units` write the same saga row (nor, so, the same timer row: a timer is its saga's), so that
 * their statements can be one statement, whose parts all see one snapshot.
 */
function writesDistinctRows(units: readonly UnitWrite[]): boolean {
  const rows = new Set(units.map(({ plan }) => `${plan.sagaType}\u0000${plan.sagaId}`));
  return rows.size === units.length;
}
