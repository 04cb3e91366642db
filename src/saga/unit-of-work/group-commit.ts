import type { EntityManager } from '@mikro-orm/core';
import type { DialectAdapter } from '../../dialect/dialect-adapter.js';
import {
  conflictKind,
  freshFork,
  isLockWait,
  isNeverSent,
  isRefusedByServer,
  queryRows,
  type UnitTransaction,
  type UnitTransactions,
} from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { runUpdatesAsOne } from '../../sql/saga-statements.js';
import { runSavepointStatement, SAVEPOINT_SQL } from '../../sql/savepoint-statements.js';
import { compareCodePoints } from '../../text/code-point-order.js';
import { type ItemOutcome, UnitBatcher } from './unit-batcher.js';
import type { UnitOfWorkPlan } from './unit-of-work-plan.js';
import {
  type PreparedWrite,
  preparedWrite,
  runNamed,
  runPlanStatements,
  type SagaRowTarget,
  StatementFailure,
  VersionConflict,
  type WriteReport,
  writePlan,
} from './write-plan.js';

/**
 * Default of `groupCommit.maxUnits`: most write phases of units of work committed in one transaction. Below 64 on
 * purpose: PostgreSQL gives each savepoint that writes a subtransaction id, and a transaction holding more than 64
 * overflows its cache of them, which makes every other session's snapshots slower.
 */
export const DEFAULT_GROUP_MAX_UNITS = 32;
/**
 * Default of `groupCommit.maxGroups` on PostgreSQL: most group transactions a runtime writes at once. On SQLite it
 * is 1 (`DialectAdapter.groupsAtOnce`).
 */
export const DEFAULT_GROUP_MAX_GROUPS = 2;
/**
 * Default of `groupCommit.lockTimeoutMs`: on PostgreSQL, how long a group transaction waits for a row lock another
 * transaction holds before the unit that needs it leaves the group. Far above the time one group holds its rows
 * (a few milliseconds per unit), so units of this runtime that touch one saga still wait for each other's groups.
 */
export const DEFAULT_GROUP_LOCK_TIMEOUT_MS = 250;

/** The limits of group commit (`groupCommit` of the runtime's options, resolved). */
export interface GroupLimits {
  readonly maxUnits: number;
  readonly maxGroups: number;
  readonly lockTimeoutMs: number;
}

/**
 * A unit of work whose write waited past its group's lock timeout for a row another transaction holds (an
 * application's own transaction, an operator's session): rolled back to its savepoint, so nothing of it was
 * written, while the rest of the group went on. The runtime runs it again in a transaction of its own, which
 * holds no other unit and waits for the row as long as the connection's own settings let it.
 */
export class LeftGroup extends Error {
  constructor(
    override readonly cause: unknown,
    reason = 'a row this unit of work writes is locked by another transaction; it left its group',
  ) {
    super(reason);
  }
}

/**
 * What the units a refused group COMMIT carried get. The database refused it (a deferred constraint, a serialization
 * failure: an error it answered with), or pg never sent it (the connection had already failed), so nothing of the
 * group was written; the refusal may be one unit's alone, and
 * the others would have committed on their own. Each leaves the group ({@link LeftGroup}): the runtime runs it again,
 * from its read, in a transaction of its own, where a refusal is that unit's own failure. A COMMIT that failed
 * otherwise (the connection) may have been applied: its units get that failure, an unknown outcome.
 */
function commitFailure(error: unknown, carried: number): ItemOutcome<never> {
  const cause = error instanceof StatementFailure ? error.cause : error;
  if (carried > 1 && (isRefusedByServer(cause) || isNeverSent(cause))) {
    return failure(new LeftGroup(error, "the group's COMMIT was refused; the unit of work is written again alone"));
  }
  return failure(error);
}

/** The write phase of one unit of work, ready to run: the step ran and its writes are planned. */
export interface UnitWrite {
  /** The unit of work's own fork; its flush runs in the group's transaction. */
  readonly em: EntityManager;
  readonly plan: UnitOfWorkPlan;
  readonly target: SagaRowTarget;
  /**
   * Where the unit takes its first row lock, compared element by element: a group writes its units in this
   * order, so concurrent groups (in this process or others) lock rows in one order and do not deadlock.
   */
  readonly lockKey: readonly string[];
}

/**
 * Writes the write phases of concurrent units of work together (a group commit): the ones that arrive while
 * `maxGroups` group transactions are being written go together in the next, up to `maxUnits`. A group is one
 * transaction with one savepoint per unit; a unit whose statements fail is rolled back to its savepoint and
 * fails alone, as if written in its own transaction, and the others commit. Every unit learns its outcome
 * after the group's COMMIT (or rollback): its effects are visible to others no earlier than they learn it.
 */
export class GroupCommit {
  private readonly batcher: UnitBatcher<UnitWrite, WriteReport>;
  private readonly alone: Slots;
  /** One unit at a time that found every solo slot taken writes with the lock timeout: see {@link writeAlone}. */
  private readonly tries = new Slots(1);
  private readonly prelude: string | undefined;
  private readonly transactions: UnitTransactions;

  constructor(db: DatabaseContext, limits: GroupLimits) {
    this.transactions = db.transactions;
    this.prelude = db.dialect.name === 'postgresql' ? lockTimeoutSql(limits.lockTimeoutMs) : undefined;
    const lockTimeoutMs = this.prelude ? limits.lockTimeoutMs : undefined;
    const groups: GroupWriter = { root: db.em, dialect: db.dialect, transactions: db.transactions, tablesWithTriggers: new Set() };
    this.batcher = new UnitBatcher((units) => writeGroup(groups, units, this.prelude, lockTimeoutMs), {
      maxItems: limits.maxUnits,
      maxBatches: limits.maxGroups,
    });
    this.alone = new Slots(limits.maxGroups);
  }

  /**
   * Writes a unit of work that left its group ({@link LeftGroup}) in a transaction of its own, which waits for
   * its row as long as the connection's settings allow. At most `maxGroups` such transactions at once: units of
   * held rows never take every pooled connection from the groups and the reads of other units. When every such
   * slot is taken (their rows may stay held for as long as another transaction lasts), the unit does not wait
   * behind them: units in that case take turns, one at a time, to write in a transaction of their own with the
   * group's lock timeout, and one whose row is still held rejects with {@link LeftGroup} again (the runtime
   * pauses, then reads and runs it again, not an attempt). A unit whose row is free commits without waiting for
   * another row. When the connection's own `lock_timeout` is the shorter limit, a wait it ends is a lock-wait
   * conflict as in any transaction of the application, not another turn.
   */
  writeAlone(unit: UnitWrite): Promise<WriteReport> {
    const { em, plan, target } = unit;
    return (
      this.alone.tryRun(() => writePlan(this.transactions, em, plan, target)) ??
      this.tries.run(async () => {
        // Only PostgreSQL's lock timeout (the prelude) makes a unit leave its group: here `prelude` is always set.
        let own = false;
        const bound = async (tx: EntityManager) => {
          const [row] = await queryRows<{ own: boolean }>(tx, this.prelude!, []);
          own = row?.own === true;
        };
        const outcome = await settle(writePlan(this.transactions, em, plan, target, bound));
        // A wait ended by the connection's own lock_timeout is the application's limit, not the group's: a
        // lock-wait conflict (retried and counted, up to CONCURRENCY_CONFLICT), not another turn.
        const result = own ? outcome : leftGroupIfLockWait(outcome);
        if (result.ok) return result.value;
        throw result.error;
      })
    );
  }

  /**
   * Writes `unit` in the next group. Rejects as `writePlan` does for a unit written alone: `VersionConflict`,
   * `StaleTimer`, or a `StatementFailure` (a failed COMMIT of the group is a `StatementFailure` of `commit`);
   * and with {@link LeftGroup} when a row it writes stayed locked by another transaction past the lock timeout.
   */
  write(unit: UnitWrite): Promise<WriteReport> {
    return this.batcher.submit(unit);
  }
}

/**
 * The statement that bounds a group transaction's lock waits (PostgreSQL): `lock_timeout` for the rest of the
 * transaction, `timeoutMs` or the connection's own setting when that is not longer. Its one row's `own` says
 * which is in force: true when the connection's own limit is. `timeoutMs` is a validated integer option, never input.
 */
export function lockTimeoutSql(timeoutMs: number): string {
  // current_setting() shows the value with its unit ('0', '50ms', '2min'), which interval input reads; pg_settings
  // would give plain milliseconds, but reading that view costs milliseconds per statement. The setting is read in
  // a subquery that OFFSET 0 keeps from being merged into the outer select: merged, set_config() runs before the
  // comparison reads the setting, which then always finds its own value.
  const own = "current_setting('lock_timeout')::interval";
  return (
    `select set_config('lock_timeout', case when own then setting else '${timeoutMs}ms' end, true), own from ` +
    `(select current_setting('lock_timeout') as setting, ${own} > interval '0' and ${own} <= interval '${timeoutMs} milliseconds' as own offset 0) as current`
  );
}

/** What a runtime's group writes share. */
interface GroupWriter {
  /** The runtime's EntityManager; each group is written on a fresh fork of it. */
  readonly root: EntityManager;
  readonly dialect: DialectAdapter;
  readonly transactions: UnitTransactions;
  /**
   * The tables (quoted) a group written as one statement found with triggers or rules: their units are written a
   * savepoint each from then on. Only ever added to: a table whose triggers are dropped later stays on the savepoint
   * path, which is correct for any table.
   */
  readonly tablesWithTriggers: Set<string>;
}

/**
 * Writes `units` in one transaction on a fresh fork of the runtime's EntityManager, each in a savepoint, in lock
 * order; returns each unit's outcome, in the order of `units`. A group of one is written as a unit alone. `prelude`
 * (the PostgreSQL lock timeout) runs first in the transaction: a unit that then waits past it for a row fails with
 * {@link LeftGroup}, rolled back alone.
 */
async function writeGroup(
  groups: GroupWriter,
  units: readonly UnitWrite[],
  prelude?: string,
  lockTimeoutMs?: number,
): Promise<ItemOutcome<WriteReport>[]> {
  const { root, transactions } = groups;
  if (units.length === 1) {
    const { em, plan, target } = units[0]!;
    // The lock bound goes with the saga row's UPDATE when the library sends it (one round trip less), else first.
    const outcome = await settle(writePlan(transactions, em, plan, target, prelude));
    return [prelude ? leftGroupIfLockWait(outcome) : outcome];
  }
  const started = performance.now();
  const together = await writeTogether(groups, units, prelude);
  if (Array.isArray(together)) return together;
  if (together === 'lock wait' && lockTimeoutMs !== undefined) {
    // The attempt waited out the group's lock bound on a row another transaction holds: written again, the group
    // waits only what is left of that bound, so a unit that waits again leaves the group at once.
    prelude = lockTimeoutSql(Math.max(1, lockTimeoutMs - Math.ceil(performance.now() - started)));
  }
  let group: UnitTransaction;
  try {
    group = await runNamed('begin', undefined, () => transactions.begin(freshFork(root)));
  } catch (error) {
    return units.map(() => failure(error));
  }
  const outcomes: (ItemOutcome<WriteReport> | undefined)[] = units.map(() => undefined);
  /** The units whose statements all ran: what COMMIT carries. */
  const carried: number[] = [];
  let broken: { readonly error: unknown } | undefined;
  for (const [position, index] of lockOrder(units).entries()) {
    // The prelude goes with the first SAVEPOINT: one round trip (no parameters, so one simple query).
    const written = await writeInSavepoint(group, units[index]!, `saga_unit_${position}`, position === 0 ? prelude : undefined);
    outcomes[index] = prelude ? leftGroupIfLockWait(written.outcome) : written.outcome;
    if (written.outcome.ok) carried.push(index);
    if (written.broke) {
      broken = { error: written.broke };
      break;
    }
  }
  if (broken || carried.length === 0) {
    await group.rollback().catch(() => undefined);
    // COMMIT was never sent, so nothing of the group was written: a unit that was written (or never reached)
    // learns the failure that ended the transaction; a unit that failed on its own keeps its own error.
    const ended = broken?.error;
    return outcomes.map((outcome) => (outcome && !outcome.ok ? outcome : failure(ended)));
  }
  try {
    await runNamed('commit', undefined, () => group.commit());
  } catch (error) {
    await group.rollback().catch(() => undefined);
    // Every unit COMMIT carried gets what a unit alone gets from a failed COMMIT ("outcome unknown" where a COMMIT can
    // fail after applying), or is written again alone when the database refused it; the units rolled back to their
    // savepoints were never part of what COMMIT carried.
    for (const index of carried) outcomes[index] = commitFailure(error, carried.length);
  }
  return outcomes.map((outcome) => outcome ?? failure(new Error('unit not written')));
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
 * Two statements per unit, not the one of `writeSagaRowAndStampTimer`: PostgreSQL plans and runs those WITH queries
 * at about twice the cost of the two UPDATEs, which here ride in one round trip anyway.
 */
async function writeTogether(
  { root, dialect, transactions, tablesWithTriggers }: GroupWriter,
  units: readonly UnitWrite[],
  prelude: string | undefined,
): Promise<ItemOutcome<WriteReport>[] | 'lock wait' | undefined> {
  const joined = transactions.runsStatementsTogether(root);
  if (!joined && !(dialect.updatesInWith && writesDistinctRows(units))) return undefined;
  const order = lockOrder(units);
  const writes: PreparedWrite[] = [];
  /** Nothing was written: the units' states are as their steps left them, for their writes one at a time. */
  const notTogether = () => {
    for (const write of writes) write.cancel();
    return undefined;
  };
  for (const index of order) {
    const { em, plan, target } = units[index]!;
    try {
      const write = preparedWrite(em, plan, target);
      if (!write) return notTogether();
      writes.push(write);
      // As one statement, only on tables not found with triggers (see runUpdatesAsOne).
      if (!joined && write.tables.some((table) => tablesWithTriggers.has(table))) return notTogether();
    } catch {
      // What the unit's own write throws (a state changed after its step) it throws again when written alone.
      return notTogether();
    }
  }
  let group: UnitTransaction;
  try {
    group = await transactions.begin(freshFork(root));
  } catch {
    return notTogether();
  }
  let answers: readonly { readonly affectedRows: number }[];
  try {
    if (prelude) await group.sendWithNextStatement(prelude);
    const statements = writes.flatMap((write) => write.statements);
    if (joined) answers = await group.runStatementsTogether(statements);
    else {
      const tables = [...new Set(writes.flatMap((write) => write.tables))];
      const one = await runUpdatesAsOne(group.em, statements, tables);
      if (!one.plain) {
        // A table with triggers or rules: the units go a savepoint each, now and from now on (see runUpdatesAsOne).
        for (const table of tables) tablesWithTriggers.add(table);
        await group.rollback().catch(() => undefined);
        return notTogether();
      }
      answers = one.answers;
    }
  } catch (error) {
    await group.rollback().catch(() => undefined);
    notTogether();
    // A deadlock, too, ended a wait for a row another transaction held (PostgreSQL checks after deadlock_timeout,
    // 1 s by default): written again, the group gets only what is left of its bound, as after a lock wait.
    return isLockWait(error) || conflictKind(error) === 'deadlock' ? 'lock wait' : undefined;
  }
  let next = 0;
  const read = writes.map((write) => {
    const own = answers.slice(next, next + write.statements.length);
    next += write.statements.length;
    return write.read(own);
  });
  if (read.includes('partial')) {
    await group.rollback().catch(() => undefined);
    return notTogether();
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

/** The positions of `units` sorted by their lock keys (stable for equal keys). */
export function lockOrder(units: readonly Pick<UnitWrite, 'lockKey'>[]): number[] {
  return units.map((_, index) => index).sort((a, b) => compareKeys(units[a]!.lockKey, units[b]!.lockKey) || a - b);
}

/**
 * Compares lock keys part by part in the database's lock order: by code point, as PostgreSQL's `collate "C"` sorts
 * the dispatcher's statements' rows (`lockedInSagaOrder`). By UTF-16 code unit, a saga type with a character above
 * U+FFFF was locked in one order here and in the other there: a deadlock (break15).
 */
function compareKeys(a: readonly string[], b: readonly string[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const order = compareCodePoints(a[i]!, b[i]!);
    if (order !== 0) return order;
  }
  return a.length - b.length;
}

/** One unit's write in the group: its outcome, and the error that ended the group's transaction, if one did. */
interface SavepointWrite {
  readonly outcome: ItemOutcome<WriteReport>;
  readonly broke?: unknown;
}

/**
 * Runs one unit's statements after a SAVEPOINT of its own on the group's transaction. When a statement fails,
 * ROLLBACK TO SAVEPOINT undoes the unit's statements (on PostgreSQL it also makes the transaction usable again)
 * and the unit fails alone. When a savepoint statement itself fails, the transaction is unusable: `broke`.
 */
async function writeInSavepoint(group: UnitTransaction, unit: UnitWrite, name: string, prelude?: string): Promise<SavepointWrite> {
  const savepoint = (sql: string) => runNamed('savepoint', undefined, () => runSavepointStatement(unit.em, sql));
  const set = SAVEPOINT_SQL.set(name);
  group.join(unit.em);
  try {
    try {
      // Where the library holds the transaction on PostgreSQL, the prelude and SAVEPOINT go with the unit's first
      // statement, in its round trip.
      for (const sql of prelude ? [prelude, set] : [set]) {
        await runNamed('savepoint', undefined, () => group.sendWithNextStatement(sql, unit.em));
      }
    } catch (error) {
      return { outcome: failure(error), broke: error };
    }
    try {
      // No RELEASE after success: a round trip per unit saved. The savepoints of a group nest instead, which
      // changes nothing for COMMIT, and ROLLBACK TO a later one leaves the earlier units' statements in place.
      return { outcome: { ok: true, value: await runPlanStatements(group, unit.em, unit.plan, unit.target) } };
    } catch (error) {
      // The unit failed before sending anything: its SAVEPOINT never ran, and there is nothing to roll back.
      if (group.withdrawUnsent(set)) return { outcome: failure(error) };
      try {
        await savepoint(SAVEPOINT_SQL.rollbackTo(name));
      } catch (ended) {
        return { outcome: failure(error), broke: ended };
      }
      return { outcome: failure(error) };
    }
  } finally {
    group.leave(unit.em);
  }
}

/** Runs at most `free` pieces of work at once; the others wait in arrival order. */
class Slots {
  private readonly waiting: (() => void)[] = [];
  constructor(private free: number) {}

  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    return this.hold(work);
  }

  /** Runs `work` now when a slot is free; undefined when none is. */
  tryRun<T>(work: () => Promise<T>): Promise<T> | undefined {
    if (this.free === 0) return undefined;
    this.free--;
    return this.hold(work);
  }

  private async hold<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

/** A unit that failed waiting for a row lock past the group's lock timeout leaves the group: {@link LeftGroup}. */
function leftGroupIfLockWait(outcome: ItemOutcome<WriteReport>): ItemOutcome<WriteReport> {
  if (outcome.ok || !(outcome.error instanceof StatementFailure) || !isLockWait(outcome.error.cause)) return outcome;
  return failure(new LeftGroup(outcome.error));
}

function failure(error: unknown): ItemOutcome<never> {
  return { ok: false, error };
}

async function settle<R>(work: Promise<R>): Promise<ItemOutcome<R>> {
  try {
    return { ok: true, value: await work };
  } catch (error) {
    return failure(error);
  }
}
