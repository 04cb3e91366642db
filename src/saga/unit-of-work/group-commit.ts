import type { EntityManager } from '@mikro-orm/core';
import {
  beginUnit,
  commitUnit,
  freshFork,
  joinTransaction,
  leaveTransaction,
  rollbackUnit,
  runSavepointStatement,
  SAVEPOINT_SQL,
} from '../../orm/compat.js';
import { type ItemOutcome, UnitBatcher } from './unit-batcher.js';
import type { UnitOfWorkPlan } from './unit-of-work-plan.js';
import { runNamed, runPlanStatements, type SagaRowTarget, type WriteReport, writePlan } from './write-plan.js';

/**
 * Default of `groupCommit.maxUnits`: most write phases of units of work committed in one transaction. Below 64 on
 * purpose: PostgreSQL gives each savepoint that writes a subtransaction id, and a transaction holding more than 64
 * overflows its cache of them, which makes every other session's snapshots slower.
 */
export const DEFAULT_GROUP_MAX_UNITS = 32;
/** Default of `groupCommit.maxGroups`: most group transactions a runtime writes at once. */
export const DEFAULT_GROUP_MAX_GROUPS = 2;

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

  constructor(root: EntityManager, limits: { readonly maxUnits: number; readonly maxGroups: number }) {
    this.batcher = new UnitBatcher((units) => writeGroup(root, units), { maxItems: limits.maxUnits, maxBatches: limits.maxGroups });
  }

  /**
   * Writes `unit` in the next group. Rejects as `writePlan` does for a unit written alone: `VersionConflict`,
   * `StaleTimer`, or a `StatementFailure` (a failed COMMIT of the group is a `StatementFailure` of `commit`).
   */
  write(unit: UnitWrite): Promise<WriteReport> {
    return this.batcher.submit(unit);
  }
}

/**
 * Writes `units` in one transaction on a fresh fork of `root`, each in a savepoint, in lock order; returns
 * each unit's outcome, in the order of `units`. A group of one is written exactly as a unit alone.
 */
export async function writeGroup(root: EntityManager, units: readonly UnitWrite[]): Promise<ItemOutcome<WriteReport>[]> {
  if (units.length === 1) return [await settle(writePlan(units[0]!.em, units[0]!.plan, units[0]!.target))];
  const group = freshFork(root);
  try {
    await runNamed('begin', undefined, () => beginUnit(group));
  } catch (error) {
    return units.map(() => failure(error));
  }
  const outcomes: (ItemOutcome<WriteReport> | undefined)[] = units.map(() => undefined);
  /** The units whose statements all ran: what COMMIT carries. */
  const carried: number[] = [];
  let broken: { readonly error: unknown } | undefined;
  for (const [position, index] of lockOrder(units).entries()) {
    const written = await writeInSavepoint(group, units[index]!, `saga_unit_${position}`);
    outcomes[index] = written.outcome;
    if (written.outcome.ok) carried.push(index);
    if (written.broke) {
      broken = { error: written.broke };
      break;
    }
  }
  if (broken || carried.length === 0) {
    await rollbackUnit(group).catch(() => undefined);
    // COMMIT was never sent, so nothing of the group was written: a unit that was written (or never reached)
    // learns the failure that ended the transaction; a unit that failed on its own keeps its own error.
    const ended = broken?.error;
    return outcomes.map((outcome) => (outcome && !outcome.ok ? outcome : failure(ended)));
  }
  try {
    await runNamed('commit', undefined, () => commitUnit(group));
  } catch (error) {
    await rollbackUnit(group).catch(() => undefined);
    // Every unit COMMIT carried gets what a unit alone gets from a failed COMMIT ("outcome unknown" where a COMMIT can
    // fail after applying); the units rolled back to their savepoints were never part of what COMMIT carried.
    for (const index of carried) outcomes[index] = failure(error);
  }
  return outcomes.map((outcome) => outcome ?? failure(new Error('unit not written')));
}

/** The positions of `units` sorted by their lock keys (stable for equal keys). */
export function lockOrder(units: readonly Pick<UnitWrite, 'lockKey'>[]): number[] {
  return units.map((_, index) => index).sort((a, b) => compareKeys(units[a]!.lockKey, units[b]!.lockKey) || a - b);
}

function compareKeys(a: readonly string[], b: readonly string[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i]! !== b[i]!) return a[i]! < b[i]! ? -1 : 1;
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
async function writeInSavepoint(group: EntityManager, unit: UnitWrite, name: string): Promise<SavepointWrite> {
  const savepoint = (sql: string) => runNamed('savepoint', undefined, () => runSavepointStatement(unit.em, sql));
  joinTransaction(unit.em, group);
  try {
    try {
      await savepoint(SAVEPOINT_SQL.set(name));
    } catch (error) {
      return { outcome: failure(error), broke: error };
    }
    try {
      // No RELEASE after success: a round trip per unit saved. The savepoints of a group nest instead, which
      // changes nothing for COMMIT, and ROLLBACK TO a later one leaves the earlier units' statements in place.
      return { outcome: { ok: true, value: await runPlanStatements(unit.em, unit.plan, unit.target) } };
    } catch (error) {
      try {
        await savepoint(SAVEPOINT_SQL.rollbackTo(name));
      } catch (ended) {
        return { outcome: failure(error), broke: ended };
      }
      return { outcome: failure(error) };
    }
  } finally {
    leaveTransaction(unit.em);
  }
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
