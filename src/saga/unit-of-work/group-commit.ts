import type { EntityManager } from '@mikro-orm/core';
import { freshFork, type UnitTransaction } from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { lockTimeoutSql } from '../../sql/lock-timeout-statement.js';
import { rollbackToSavepoint, setSavepoint } from '../../sql/savepoint-statements.js';
import { queryRows, sendStatement } from '../../sql/sql-executor.js';
import type { GroupLimits } from '../runtime-options.js';
import { commitFailure, failure, leftGroupIfLockWait, settle } from './group-outcomes.js';
import { lockOrder } from './lock-order.js';
import { type ItemOutcome, UnitBatcher } from './unit-batcher.js';
import type { UnitWrite } from './unit-write.js';
import { runNamed } from './write-failures.js';
import { runPlanStatements, type WriteReport, writePlan } from './write-plan.js';
import { type GroupWriter, writeTogether } from './write-together.js';

export { LeftGroup } from './group-outcomes.js';

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

  constructor(
    private readonly db: DatabaseContext,
    limits: GroupLimits,
  ) {
    this.prelude = db.dialect.name === 'postgresql' ? lockTimeoutSql(limits.lockTimeoutMs) : undefined;
    const lockTimeoutMs = this.prelude ? limits.lockTimeoutMs : undefined;
    const groups: GroupWriter = { db, tablesWithTriggers: new Set() };
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
      this.alone.tryRun(() => writePlan(this.db, em, plan, target)) ??
      this.tries.run(async () => {
        // Only PostgreSQL's lock timeout (the prelude) makes a unit leave its group: here `prelude` is always set.
        let own = false;
        const bound = async (tx: EntityManager) => {
          const [row] = await queryRows<{ own: boolean }>(tx, { sql: this.prelude!, params: [] });
          own = row?.own === true;
        };
        const outcome = await settle(writePlan(this.db, em, plan, target, bound));
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
   * `StaleClaim`, or a `StatementFailure` (a failed COMMIT of the group is a `StatementFailure` of `commit`);
   * and with {@link LeftGroup} when a row it writes stayed locked by another transaction past the lock timeout.
   */
  write(unit: UnitWrite): Promise<WriteReport> {
    return this.batcher.submit(unit);
  }
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
  const { db } = groups;
  if (units.length === 1) {
    const { em, plan, target } = units[0]!;
    // The lock bound goes with the saga row's UPDATE when the library sends it (one round trip less), else first.
    const outcome = await settle(writePlan(db, em, plan, target, prelude));
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
    group = await runNamed('begin', undefined, () => db.transactions.begin(freshFork(db.em)));
  } catch (error) {
    return units.map(() => failure(error));
  }
  return writeInSavepoints(db, group, units, prelude);
}

/**
 * Writes `units` in `group`, each in a savepoint, in lock order, then commits it; each unit's outcome, in the order
 * of `units`. `prelude` goes with the first SAVEPOINT.
 */
async function writeInSavepoints(
  db: DatabaseContext,
  group: UnitTransaction,
  units: readonly UnitWrite[],
  prelude: string | undefined,
): Promise<ItemOutcome<WriteReport>[]> {
  const outcomes: (ItemOutcome<WriteReport> | undefined)[] = units.map(() => undefined);
  /** The units whose statements all ran: what COMMIT carries. */
  const carried: number[] = [];
  let broken: { readonly error: unknown } | undefined;
  for (const [position, index] of lockOrder(units).entries()) {
    // The prelude goes with the first SAVEPOINT: one round trip (no parameters, so one simple query).
    const written = await writeInSavepoint(db, group, units[index]!, `saga_unit_${position}`, position === 0 ? prelude : undefined);
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
async function writeInSavepoint(
  db: DatabaseContext,
  group: UnitTransaction,
  unit: UnitWrite,
  name: string,
  prelude?: string,
): Promise<SavepointWrite> {
  const set = setSavepoint(name).sql;
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
      return { outcome: { ok: true, value: await runPlanStatements(db, group, unit.em, unit.plan, unit.target) } };
    } catch (error) {
      // The unit failed before sending anything: its SAVEPOINT never ran, and there is nothing to roll back.
      if (group.withdrawUnsent(set)) return { outcome: failure(error) };
      try {
        await runNamed('savepoint', undefined, () => sendStatement(unit.em, rollbackToSavepoint(name)));
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
